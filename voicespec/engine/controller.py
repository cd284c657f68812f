"""Choosing the lookahead γ each step.

Leviathan et al.: with per-position acceptance probabilities α_1..α_γ (α_i = P(draft i accepted |
drafts before it accepted)), a verify pass commits on average ``1 + Σ_i Π_{j≤i} α_j`` steps and
costs ``γ·c_draft + c_verify(γ+1)``. The adaptive controller measures both sides and picks the γ
with the most expected steps per second; γ = 0 (plain decoding) competes on equal terms, so a
drafter that does not pay is switched off, then probed again now and then so it can come back.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from voicespec.checks import is_int


def check_gamma(value: Any) -> int | str:
    """The one rule for γ: an integer >= 0, or ``"auto"`` (the adaptive controller)."""
    if value == "auto" or (is_int(value) and value >= 0):
        return value
    raise ValueError(f"gamma must be an integer >= 0 or 'auto', got {value!r}")


MAX_TREE_NODES = 64


def check_branching(branching: Any) -> tuple[int, ...]:
    """The one rule for a tree's shape: a non-empty sequence of integers >= 1, at most
    ``MAX_TREE_NODES`` draft nodes in all (standard library only: configs check it too)."""
    try:
        b = tuple(branching)
    except TypeError:
        b = ()
    if not b or not all(is_int(x) and x >= 1 for x in b):
        raise ValueError(f"a tree needs branching factors >= 1 per depth, e.g. (2, 2, 1), got {branching!r}")
    total, width = 0, 1
    for x in b:
        width *= x
        total += width
    if total > MAX_TREE_NODES:
        raise ValueError(f"a tree of {total} draft nodes is more than {MAX_TREE_NODES}")
    return b


def expected_steps(alphas: Sequence[float], gamma: int) -> float:
    """Expected steps committed by one verify pass of a γ-step draft."""
    total, run = 1.0, 1.0
    for a in alphas[:gamma]:
        run *= a
        total += run
    return total


def step_cost(gamma: int, draft_cost: float, verify_cost: Callable[[int], float]) -> float:
    """Seconds for one draft-and-verify step: γ draft steps plus a verify pass of γ+1 positions."""
    return gamma * draft_cost + verify_cost(gamma + 1)


def best_gamma(
    alphas: Sequence[float],
    draft_cost: float,
    verify_cost: Callable[[int], float],
    gamma_max: int,
    time_cap: float | None = None,
) -> int:
    """The γ in ``0..gamma_max`` maximising expected steps per second, among those whose step
    fits in ``time_cap`` seconds (γ = 0 when none does: nothing faster exists)."""
    best, best_rate = 0, -1.0
    for g in range(min(gamma_max, len(alphas)) + 1):
        cost = step_cost(g, draft_cost, verify_cost)
        if g and time_cap is not None and cost > time_cap:
            continue
        rate = expected_steps(alphas, g) / max(cost, 1e-12)
        if rate > best_rate * (1 + 1e-9):
            best, best_rate = g, rate
    return best


class Controller(Protocol):
    def choose(self, limit: int) -> int:
        """γ for the next step, at most ``limit``."""

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        """Feed back one step: steps drafted/accepted whole and the measured times."""


@dataclass
class FixedGamma:
    gamma: int

    def __post_init__(self) -> None:
        if check_gamma(self.gamma) == "auto":
            raise ValueError("FixedGamma needs an integer; 'auto' is AdaptiveGamma")

    def choose(self, limit: int) -> int:
        return min(self.gamma, limit)

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        pass


@dataclass
class ControllerConfig:
    gamma_max: int = 8
    smoothing: float = 0.15  # EWMA weight of a new observation
    prior_acceptance: float = 0.6  # before anything is measured: optimistic enough to try
    probe_every: int = 16  # while off, try a short draft after this many plain steps
    probe_gamma: int = 2
    time_cap_s: float | None = None  # per-step latency budget; never plan a step above it


class AdaptiveGamma:
    """EWMA acceptance per position and EWMA costs; γ maximising expected steps per second."""

    def __init__(self, config: ControllerConfig | None = None, verify_costs: dict[int, float] | None = None) -> None:
        self.config = c = config or ControllerConfig()
        if c.gamma_max < 1:
            raise ValueError("gamma_max must be >= 1")
        self.alphas = [c.prior_acceptance] * c.gamma_max
        self.draft_cost: float | None = None
        # The target's pass cost does not depend on the drafter: controllers of several drafters
        # of one request share it (engine/drafters/choice.py).
        self.verify_costs: dict[int, float] = {} if verify_costs is None else verify_costs
        self.off_steps = 0

    def verify_cost(self, n: int) -> float:
        """Measured cost of verifying ``n`` positions; unmeasured sizes are interpolated linearly
        between measured ones and extrapolated with the slope between the extreme two (flat when
        only one size is known — on small models a pass costs about the same for any n)."""
        known = self.verify_costs
        if n in known:
            return known[n]
        if not known:
            return 1.0
        xs = sorted(known)
        lo = [x for x in xs if x < n]
        hi = [x for x in xs if x > n]
        if lo and hi:
            a, b = lo[-1], hi[0]
            return known[a] + (known[b] - known[a]) * (n - a) / (b - a)
        if len(xs) == 1:
            return known[xs[0]]
        a, b = (xs[-2], xs[-1]) if not hi else (xs[0], xs[1])
        slope = max(0.0, (known[b] - known[a]) / (b - a))
        edge = xs[-1] if not hi else xs[0]
        return max(1e-9, known[edge] + slope * (n - edge))

    def _probe(self, limit: int) -> int:
        """A short draft to (re)measure the drafter: at most ``probe_gamma``, and never a step the
        current estimates say would break the time cap."""
        c = self.config
        g = min(c.probe_gamma, c.gamma_max, limit)
        if c.time_cap_s is not None and self.draft_cost is not None:
            while g and step_cost(g, self.draft_cost, self.verify_cost) > c.time_cap_s:
                g -= 1
        return g

    def best(self, limit: int) -> tuple[int, float]:
        """The γ the estimates favour now and its expected steps per second (before any probe)."""
        c = self.config
        g = best_gamma(self.alphas, self.draft_cost or 0.0, self.verify_cost, min(c.gamma_max, limit), c.time_cap_s)
        return g, expected_steps(self.alphas, g) / max(step_cost(g, self.draft_cost or 0.0, self.verify_cost), 1e-12)

    def choose(self, limit: int) -> int:
        c = self.config
        if self.draft_cost is None:  # measure the drafter once before judging it
            g = self._probe(limit)
        else:
            g = self.best(limit)[0]
            if g == 0:
                self.off_steps += 1
                if self.off_steps >= c.probe_every:
                    self.off_steps = 0
                    g = self._probe(limit)
            else:
                self.off_steps = 0
        return g

    def observe(self, drafted: int, accepted: int, draft_s: float, verify_s: float) -> None:
        w = self.config.smoothing
        n = drafted + 1
        old = self.verify_costs.get(n)
        self.verify_costs[n] = verify_s if old is None else (1 - w) * old + w * verify_s
        if drafted == 0:
            return
        per_step = draft_s / drafted
        self.draft_cost = per_step if self.draft_cost is None else (1 - w) * self.draft_cost + w * per_step
        # Positions 1..accepted were accepted; position accepted+1 (if drafted) was rejected.
        for i in range(min(drafted, accepted + 1)):
            hit = 1.0 if i < accepted else 0.0
            self.alphas[i] = (1 - w) * self.alphas[i] + w * hit
        # Positions beyond the draft were not observed. Drift them (slowly) up towards the deepest
        # observed rate, so a drafter that keeps being accepted gets tried at a longer γ instead
        # of being judged forever on the prior.
        edge = self.alphas[drafted - 1]
        for i in range(drafted, len(self.alphas)):
            if self.alphas[i] < edge:
                self.alphas[i] += w / 2 * (edge - self.alphas[i])
