"""Choosing the lookahead γ each step.

Leviathan et al.: with per-position acceptance probabilities α_1..α_γ (α_i = P(draft i accepted |
drafts before it accepted)), a verify pass commits on average ``1 + Σ_i Π_{j≤i} α_j`` steps and
costs ``γ·c_draft + c_verify(γ+1)``. The adaptive controller measures both sides and picks the γ
with the most expected steps per second; γ = 0 (plain decoding) competes on equal terms, so a
drafter that does not pay is switched off, then probed again now and then so it can come back.

Acceptance is estimated from decayed counts, not a per-position moving average: each pass judges
only ``accepted + 1`` positions, so a per-position average of 0/1 outcomes is too noisy to choose
γ from (measured here: true α ≈ 0.7 at every position read as 0.6–0.98). Every judged position
feeds one pooled rate, and each position's rate is its own counts shrunk towards it. The
estimates (:class:`Estimates`) outlive a request: a :class:`ControllerMemory` keeps one set per
sampling setting for every request of a drafter, as a server learns its machine and its drafter.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from voicespec.checks import is_int
from voicespec.engine.tree_shapes import StaticTree, check_branching, tree_nodes


def check_gamma(value: Any) -> int | str:
    """The one rule for γ: an integer >= 0, or ``"auto"`` (the adaptive controller)."""
    if value == "auto" or (is_int(value) and value >= 0):
        return value
    raise ValueError(f"gamma must be an integer >= 0 or 'auto', got {value!r}")


def expected_steps(alphas: Sequence[float], gamma: int) -> float:
    """Expected steps committed by one verify pass of a γ-step draft."""
    total, run = 1.0, 1.0
    for a in alphas[:gamma]:
        run *= a
        total += run
    return total


def step_cost(gamma: int, draft_cost: float, verify_cost: Callable[[int], float],
              commit_cost: Callable[[float], float] | None = None, steps: float = 0.0) -> float:
    """Seconds for one draft-and-verify step: γ draft steps, a verify pass of γ+1 positions, and
    ``commit_cost(steps)`` for completing the ``steps`` it commits (a fine stage: per frame when
    it completes frames one after another, which speculation cannot amortize; about once per
    pass when it completes them as one batch)."""
    return gamma * draft_cost + verify_cost(gamma + 1) + (commit_cost(steps) if commit_cost else 0.0)


def best_gamma(
    alphas: Sequence[float],
    draft_cost: float,
    verify_cost: Callable[[int], float],
    gamma_max: int,
    time_cap: float | None = None,
    commit_cost: Callable[[float], float] | None = None,
) -> int:
    """The γ in ``0..gamma_max`` maximising expected steps per second, among those whose step
    fits in ``time_cap`` seconds (γ = 0 when none does: nothing faster exists)."""
    best, best_rate = 0, -1.0
    for g in range(min(gamma_max, len(alphas)) + 1):
        steps = expected_steps(alphas, g)
        cost = step_cost(g, draft_cost, verify_cost, commit_cost, steps)
        if g and time_cap is not None and cost > time_cap:
            continue
        rate = steps / max(cost, 1e-12)
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = g, rate
    return best


CHAIN = "chain"  # a probe of the chain while a tree wins


class Controller(Protocol):
    def choose(self, limit: int) -> int | StaticTree:
        """γ for the next step, at most ``limit``, or a static tree no deeper."""

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float, commit_s: float = 0.0,
                tree: Hashable | None = None, slots: int = 0, batch: int = 1) -> None:
        """Feed back one step: steps drafted/accepted whole and the measured times (``commit_s``:
        the work done for the steps it committed, apart from the pass); ``slots``: the positions
        the pass ran per row (its width in a batch; 0: ``drafted + 1``); ``batch``: the sessions in
        it. A tree step names its ``tree`` (what it was chosen as); ``drafted`` is its depth."""


@dataclass
class FixedGamma:
    gamma: int

    def __post_init__(self) -> None:
        if check_gamma(self.gamma) == "auto":
            raise ValueError("FixedGamma needs an integer; 'auto' is AdaptiveGamma")

    def choose(self, limit: int) -> int:
        return min(self.gamma, limit)

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float, commit_s: float = 0.0,
                tree: Hashable | None = None, slots: int = 0, batch: int = 1) -> None:
        pass


@dataclass
class ControllerConfig:
    gamma_max: int = 8
    smoothing: float = 0.05  # weight of a new cost observation; older ones are multiplied by 1 - this
    fade: float = 0.02  # acceptance counts fade by this fraction per verify pass (~1/fade passes remembered)
    shrinkage: float = 4.0  # pseudo-observations pulling a position's acceptance towards the pooled rate
    prior_acceptance: float = 0.6  # before anything is measured: optimistic enough to try
    probe_every: int = 16  # while off, try a short draft after this many plain steps
    probe_gamma: int = 2
    time_cap_s: float | None = None  # per-step latency budget; never plan a step above it
    # Static trees the adaptive controller weighs against chains, for a drafter that drafts trees;
    # None: the drafter's own (fitted to its target's measured acceptance, else DEFAULT_TREES).
    trees: tuple[StaticTree, ...] | None = None
    tree_probe: int = 6  # passes a tree is drafted in a row when (re)measured: one pass is too noisy a sample
    # A tree and the chain swap only when the other promises this fraction more steps per second:
    # their rates come from noisy timings, and where they were close they crossed back and forth
    # (measured at 2 threads: 5-20 % of passes sent to the chain besides its probes, while the
    # tree was drafted at an expected 15 % more).
    switch_margin: float = 0.05

    def __post_init__(self) -> None:
        if self.trees is not None:
            self.trees = tuple(check_branching(t) for t in self.trees)
        if not 0 <= self.switch_margin < 1:
            raise ValueError(f"switch_margin must be in [0, 1), got {self.switch_margin}")


@dataclass
class CostLine:
    """Seconds as ``a + b·x`` (a, b ≥ 0) by decayed least squares over every observation, whatever
    its x. One line read from recent passes of every size, not an average per size: on a machine
    whose speed drifts (measured here: the same pass 8 ms one minute, 13 ms the next) averages
    per size taken at different times are not comparable, and a size measured in a slow minute and
    never chosen again kept the controller away from it. While (nearly) one x has been seen the
    slope is unknown: ``one_size`` "flat" reads it as 0 (a pass of any size costs what was
    measured, so the controller tries other sizes and learns), "proportional" as cost per unit
    (a = 0). ``sums``: decayed weight, Σx, Σx², Σy, Σxy; ``fit``: (a, b), None before any
    observation (refitted on each one, read many times per choice of γ)."""

    one_size: str = "flat"
    sums: list[float] = field(default_factory=lambda: [0.0] * 5)
    fit: tuple[float, float] | None = None

    def add(self, x: float, y: float, keep: float) -> None:
        """One observation; the earlier ones fade by ``keep`` (in place: the line may be shared)."""
        self.sums[:] = [keep * t + d for t, d in zip(self.sums, (1.0, x, x * x, y, x * y))]
        self.fit = self._line()

    def _line(self) -> tuple[float, float]:
        n, sx, sxx, sy, sxy = self.sums
        variance = sxx / n - (sx / n) ** 2
        # Too little spread in x to read a slope (with x one apart: under ~1 % of the weight at the
        # other size; further apart, less): one size seen.
        if variance < 1e-2 or not sx:
            return (sy / n, 0.0) if self.one_size == "flat" or not sx else (0.0, sy / sx)
        b = (sxy / n - sx * sy / n / n) / variance
        a = (sy - b * sx) / n
        if b < 0:
            return sy / n, 0.0
        if a < 0:
            return 0.0, sy / sx
        return a, b


@dataclass
class Estimates:
    """What an adaptive controller has learnt; shared by the requests of one drafter and sampling
    setting (:class:`ControllerMemory`). ``hits[i]`` / ``tries[i]``: decayed counts of drafts
    accepted / judged at position ``i + 1``; costs in seconds."""

    hits: list[float] = field(default_factory=list)
    tries: list[float] = field(default_factory=list)
    draft_cost: float | None = None  # per drafted step (EWMA)
    verify: CostLine = field(default_factory=CostLine)  # a pass, by positions verified
    commit: CostLine = field(default_factory=lambda: CostLine("proportional"))  # the fine stage, by committed steps
    trees: dict[Hashable, TreeEstimate] = field(default_factory=dict)  # per tree drafted
    since_probe: int = 0  # drafting steps since the last probe of a tree or (while a tree wins) of the chain
    probing: tuple[Hashable, int] | None = None  # what is being probed (a tree, or CHAIN) and the passes left
    tree_in_use: bool = False  # whether the last choice outside a probe was a tree (ControllerConfig.switch_margin)


@dataclass
class TreeEstimate:
    """One tree's record: decayed sums of the steps its passes committed and of its passes, and
    its drafting cost per depth as a multiple of a chained draft step (a ratio of two costs
    measured in the same minutes, so it holds when the machine's speed drifts)."""

    steps: float = 0.0
    passes: float = 0.0
    draft_ratio: float | None = None

    def mean_steps(self, prior: float, weight: float) -> float:
        """Steps per pass, shrunk towards ``prior`` by ``weight`` pseudo-passes (one unlucky
        first pass must not rule a tree out)."""
        return (self.steps + weight * prior) / (self.passes + weight)


class ControllerMemory:
    """:class:`Estimates` that outlive a request, one set per key (the sampling setting: a
    drafter's acceptance differs between greedy and sampled decoding)."""

    def __init__(self) -> None:
        self._estimates: dict[Hashable, Estimates] = {}

    def estimates(self, key: Hashable) -> Estimates:
        return self._estimates.setdefault(key, Estimates())


class AdaptiveGamma:
    """Acceptance by position from decayed counts, costs as decayed lines; γ maximising expected
    steps per second. ``estimates``: start from (and keep updating) shared ones; ``verify``: share
    only the target's pass costs (the candidates of one request, engine/drafters/choice.py)."""

    def __init__(self, config: ControllerConfig | None = None, verify: CostLine | None = None,
                 estimates: Estimates | None = None, trees: Sequence[StaticTree] = ()) -> None:
        self.config = c = config or ControllerConfig()
        if c.gamma_max < 1:
            raise ValueError("gamma_max must be >= 1")
        self.estimates = estimates if estimates is not None else Estimates()
        if verify is not None:
            self.estimates.verify = verify
        # the candidate trees: the drafter's own (none: it drafts no trees), or the config's instead
        self.trees = (tuple(check_branching(t) for t in trees) if c.trees is None else c.trees) if trees else ()
        self.batch = 0  # sessions in this request's last pass (0: no pass yet, so not known to be alone)
        self.off_steps = 0

    @property
    def draft_cost(self) -> float | None:
        return self.estimates.draft_cost

    @property
    def alphas(self) -> list[float]:
        """Acceptance at positions ``1..gamma_max``: each position's counts plus ``shrinkage``
        pseudo-observations at the pooled rate (itself shrunk towards the prior)."""
        e, k = self.estimates, self.config.shrinkage
        pooled = (sum(e.hits) + k * self.config.prior_acceptance) / (sum(e.tries) + k)
        n = self.config.gamma_max
        hits, tries = e.hits[:n] + [0.0] * (n - len(e.hits)), e.tries[:n] + [0.0] * (n - len(e.tries))
        return [(h + k * pooled) / (t + k) for h, t in zip(hits, tries)]

    def commit_cost(self, steps: float) -> float:
        """Seconds to complete ``steps`` committed steps, ``a + b·steps``: a fine stage that
        completes frames one by one costs per step, one that completes a pass's frames as a batch
        about per pass (all passes at one step count: charged per step)."""
        fit = self.estimates.commit.fit
        return 0.0 if fit is None else fit[0] + fit[1] * steps

    def verify_cost(self, n: int) -> float:
        """Seconds for a pass verifying ``n`` positions (everything after drafting but the fine
        stage), ``a + b·n``; 1 s before anything is measured."""
        fit = self.estimates.verify.fit
        return 1.0 if fit is None else max(1e-9, fit[0] + fit[1] * n)

    def _probe(self, limit: int) -> int:
        """A short draft to (re)measure the drafter: at most ``probe_gamma``, and never a step the
        current estimates say would break the time cap."""
        c = self.config
        g = min(c.probe_gamma, c.gamma_max, limit)
        e = self.estimates
        if c.time_cap_s is not None and e.draft_cost is not None:
            alphas = self.alphas
            while g and step_cost(g, e.draft_cost, self.verify_cost, self.commit_cost, expected_steps(alphas, g)) > c.time_cap_s:
                g -= 1
        return g

    def best(self, limit: int) -> tuple[int, float]:
        """The γ the estimates favour now and its expected steps per second (before any probe)."""
        c = self.config
        alphas, e = self.alphas, self.estimates
        g = best_gamma(alphas, e.draft_cost or 0.0, self.verify_cost, min(c.gamma_max, limit), c.time_cap_s, self.commit_cost)
        steps = expected_steps(alphas, g)
        return g, steps / max(step_cost(g, e.draft_cost or 0.0, self.verify_cost, self.commit_cost, steps), 1e-12)

    def tree_rate(self, branching: StaticTree) -> float | None:
        """Expected steps per second of drafting ``branching`` each step, from its record (None:
        never drafted); 0 when its step would break the time cap."""
        est = self.estimates.trees.get(branching)
        if est is None or not est.passes or est.draft_ratio is None or self.draft_cost is None:
            return None
        # Prior: what a chain as deep commits (a tree holds a chain of first candidates, so more).
        steps = est.mean_steps(expected_steps(self.alphas, len(branching)), self.config.shrinkage)
        cost = self._tree_cost(branching, est.draft_ratio, steps)
        cap = self.config.time_cap_s
        return 0.0 if cap is not None and cost > cap else steps / max(cost, 1e-12)

    def _tree_cost(self, branching: StaticTree, draft_ratio: float, steps: float) -> float:
        return (len(branching) * draft_ratio * (self.draft_cost or 0.0) + self.verify_cost(tree_nodes(branching) + 1)
                + self.commit_cost(steps))

    def _fits_cap(self, branching: StaticTree, rate: float | None) -> bool:
        """Whether drafting ``branching`` fits the time cap (one never drafted: priced as a
        chain of its depth plus a pass over its slots)."""
        cap = self.config.time_cap_s
        if cap is None:
            return True
        if rate is None:
            return self._tree_cost(branching, 1.0, expected_steps(self.alphas, len(branching))) <= cap
        return rate > 0

    def choose(self, limit: int) -> int | StaticTree:
        c = self.config
        if self.draft_cost is None:  # measure the drafter once before judging it
            return self._probe(limit)
        g, rate = self.best(limit)
        if g == 0:
            self.off_steps += 1
            if self.off_steps >= c.probe_every:
                self.off_steps = 0
                g = self._probe(limit)
            return g
        self.off_steps = 0
        return self._tree_or(g, rate, limit)

    def _tree_or(self, g: int, rate: float, limit: int) -> int | StaticTree:
        """While drafting pays: a tree that promises more steps per second than the best chain is
        drafted, else the chain (the one in use keeps its place until the other promises
        ``switch_margin`` more); a candidate never drafted is probed after ``probe_every`` steps
        (not at once: an utterance's first steps are accepted less than its others, by any
        draft), and every ``4 · probe_every`` steps (of every request sharing the estimates) the
        one not in use — the best tree, or the chain while a tree wins — is probed, to keep its
        record current (and the verify line's slope, which one pass size alone cannot give).
        A probe drafts ``tree_probe`` passes in a row."""
        if self.batch != 1:  # a tree widens every row of a batched pass to its slots: alone only
            return g
        rates = {t: self.tree_rate(t) for t in self.trees if len(t) <= limit}
        rates = {t: r for t, r in rates.items() if self._fits_cap(t, r)}  # those it may draft now
        if not rates:
            return g
        e = self.estimates
        if e.probing is not None and (e.probing[0] == CHAIN or e.probing[0] in rates):
            plan, left = e.probing
            e.probing = (plan, left - 1) if left > 1 else None
            return g if plan == CHAIN else plan
        fresh = [t for t, r in rates.items() if r is None]
        best = max(rates, key=lambda t: rates[t] or 0.0)
        edge = 1 - self.config.switch_margin if e.tree_in_use else 1 + self.config.switch_margin
        tree_wins = e.tree_in_use = not fresh and (rates[best] or 0.0) > rate * edge
        e.since_probe += 1
        if e.since_probe >= (1 if fresh else 4) * self.config.probe_every:
            e.since_probe = 0
            other = fresh[0] if fresh else CHAIN if tree_wins else best
            e.probing = (other, self.config.tree_probe - 1) if self.config.tree_probe > 1 else None
            return g if other == CHAIN else other
        return best if tree_wins else g

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float, commit_s: float = 0.0,
                tree: Hashable | None = None, slots: int = 0, batch: int = 1) -> None:
        e, w = self.estimates, self.config.smoothing
        self.batch = batch
        e.verify.add(slots or drafted + 1, verify_s, 1 - w)
        e.commit.add(accepted + 1, commit_s, 1 - w)
        if tree is not None:  # a tree's record; the chain's acceptance by position is another matter
            est = e.trees.setdefault(tree, TreeEstimate())
            keep = 1 - self.config.fade
            est.steps, est.passes = keep * est.steps + accepted + 1, keep * est.passes + 1
            if self.draft_cost and drafted:
                ratio = draft_s / drafted / self.draft_cost
                est.draft_ratio = ratio if est.draft_ratio is None else (1 - w) * est.draft_ratio + w * ratio
            return
        if drafted == 0:
            return
        per_step = draft_s / drafted
        e.draft_cost = per_step if e.draft_cost is None else (1 - w) * e.draft_cost + w * per_step
        # Positions 1..accepted were accepted; position accepted+1 (if drafted) was rejected; the
        # rest were never judged.
        keep = 1 - self.config.fade
        judged = min(drafted, accepted + 1)
        if len(e.tries) < judged:
            e.hits += [0.0] * (judged - len(e.hits))
            e.tries += [0.0] * (judged - len(e.tries))
        for i in range(len(e.tries)):
            e.hits[i] = keep * e.hits[i] + (i < accepted)
            e.tries[i] = keep * e.tries[i] + (i < judged)
