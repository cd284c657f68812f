"""Unit tests for the lookahead controller, on synthetic acceptance and cost inputs only."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from voicespec.engine.controller import (
    AdaptiveGamma,
    ControllerConfig,
    CostLine,
    ControllerMemory,
    FixedGamma,
    TreeEstimate,
    best_gamma,
    expected_steps,
    step_cost,
)
from voicespec.engine.drafters.choice import ChoiceSession


def flat(cost: float = 1.0):
    return lambda n: cost


# --------------------------------------------------------------------------- expected_steps


@pytest.mark.parametrize(
    ("alphas", "gamma", "want"),
    [
        ([0.5, 0.5], 2, 1.75),  # 1 + .5 + .5*.5
        ([0.5, 0.5], 1, 1.5),
        ([0.5, 0.5], 0, 1.0),  # plain decoding always commits exactly one step
        ([0.9, 0.9, 0.9], 0, 1.0),
        ([1.0] * 5, 5, 6.0),  # perfect drafter: γ accepted + 1 bonus
        ([1.0] * 5, 3, 4.0),
        ([0.8, 0.5, 0.25], 3, 2.3),  # 1 + .8 + .4 + .1
        ([0.0, 1.0, 1.0], 3, 1.0),  # a rejection at position 1 stops the chain
        ([1.0, 1.0], 5, 3.0),  # alphas shorter than γ: only the known positions count
        ([], 4, 1.0),
    ],
)
def test_expected_steps(alphas, gamma, want):
    assert expected_steps(alphas, gamma) == pytest.approx(want)


def test_expected_steps_monotone_in_gamma():
    rng = random.Random(0)
    for _ in range(50):
        alphas = [rng.random() for _ in range(8)]
        vals = [expected_steps(alphas, g) for g in range(9)]
        assert all(b >= a for a, b in zip(vals, vals[1:]))
        assert 1.0 <= vals[-1] <= 9.0


def test_step_cost():
    # γ draft steps plus one verify pass over γ+1 positions
    assert step_cost(0, 0.3, lambda n: 10.0 * n) == pytest.approx(10.0)
    assert step_cost(3, 0.5, lambda n: 10.0 * n) == pytest.approx(1.5 + 40.0)


# --------------------------------------------------------------------------- best_gamma


@pytest.mark.parametrize("alpha", [0.0, 0.01, 0.05])
def test_best_gamma_useless_drafter_is_off(alpha):
    # g=1 with alpha .05: 1.05 steps / 1.1 s < 1 step / 1 s
    assert best_gamma([alpha] * 8, 0.1, flat(1.0), 8) == 0


def test_best_gamma_tie_prefers_smaller_gamma():
    # alphas 0 and a free drafter: every γ has rate 1/1 — no reason to draft.
    assert best_gamma([0.0] * 8, 0.0, flat(1.0), 8) == 0


def test_best_gamma_perfect_free_drafter_uses_max():
    assert best_gamma([1.0] * 8, 0.0, flat(1.0), 8) == 8
    assert best_gamma([1.0] * 8, 1e-6, flat(1.0), 8) == 8
    assert best_gamma([1.0] * 8, 0.0, flat(1.0), 5) == 5  # capped by gamma_max
    assert best_gamma([1.0] * 3, 0.0, flat(1.0), 8) == 3  # capped by the known positions
    assert best_gamma([1.0] * 8, 0.0, flat(1.0), 0) == 0


def test_best_gamma_intermediate_hand_computed():
    alphas = [0.9, 0.8, 0.5, 0.2]
    verify = lambda n: 1.0 + 0.05 * (n - 1)  # noqa: E731
    # draft_cost 0.1:
    # g=0: steps 1                        cost 1.00          rate 1.000
    # g=1: steps 1 + .9          = 1.9    cost .1 + 1.05 = 1.15  rate 1.652
    # g=2: steps 1.9 + .72       = 2.62   cost .2 + 1.10 = 1.30  rate 2.015
    # g=3: steps 2.62 + .36      = 2.98   cost .3 + 1.15 = 1.45  rate 2.055  <- best
    # g=4: steps 2.98 + .072     = 3.052  cost .4 + 1.20 = 1.60  rate 1.908
    assert best_gamma(alphas, 0.1, verify, 8) == 3
    # a cap of 1.4 s rules out g=3 (1.45) and g=4 (1.60): the best that fits is g=2.
    assert best_gamma(alphas, 0.1, verify, 8, time_cap=1.4) == 2
    # exactly at a step's cost still fits
    assert best_gamma(alphas, 0.1, verify, 8, time_cap=1.45) == 3
    # a pricier drafter (0.3/step): g=1 1.9/1.35=1.407, g=2 2.62/1.7=1.541, g=3 2.98/2.05=1.454
    assert best_gamma(alphas, 0.3, verify, 8) == 2


def test_best_gamma_time_cap():
    alphas, dc, v = [1.0] * 8, 0.1, flat(1.0)
    assert best_gamma(alphas, dc, v, 8) == 8  # uncapped: 9 steps / 1.8 s
    # cap 1.35: 1 + 0.1 g <= 1.35 -> g <= 3
    assert best_gamma(alphas, dc, v, 8, time_cap=1.35) == 3
    # nothing with a draft fits -> 0 (even though 0 itself is over the cap: nothing is faster)
    assert best_gamma(alphas, 0.5, v, 8, time_cap=1.2) == 0
    assert best_gamma(alphas, dc, v, 8, time_cap=0.5) == 0


def test_best_gamma_never_exceeds_cap_random():
    rng = random.Random(1)
    for _ in range(300):
        alphas = [rng.random() ** 0.3 for _ in range(8)]
        dc = rng.uniform(0, 0.3)
        base, slope = rng.uniform(0.5, 1.5), rng.uniform(0, 0.2)
        verify = lambda n, b=base, s=slope: b + s * n  # noqa: E731
        cap = rng.uniform(0.5, 3.0)
        gmax = rng.randint(0, 8)
        g = best_gamma(alphas, dc, verify, gmax, time_cap=cap)
        assert 0 <= g <= gmax
        if g:
            assert step_cost(g, dc, verify) <= cap
        # and it is the best among those that fit
        fits = [h for h in range(gmax + 1) if h == 0 or step_cost(h, dc, verify) <= cap]
        rate = lambda h: expected_steps(alphas, h) / step_cost(h, dc, verify)  # noqa: E731
        assert rate(g) >= max(rate(h) for h in fits) * (1 - 1e-9)


# --------------------------------------------------------------------------- AdaptiveGamma


def run(ctrl: AdaptiveGamma, steps: int, drafter, limit: int = 8) -> list[int]:
    """Drive ``ctrl`` with a synthetic drafter: ``drafter(g) -> (accepted, draft_s, verify_s)``."""
    out = []
    for _ in range(steps):
        g = ctrl.choose(limit)
        out.append(g)
        accepted, draft_s, verify_s = drafter(g)
        ctrl.observe(g, accepted, draft_s, verify_s)
    return out


def perfect_cheap(g):
    return g, 0.001 * g, 0.010 + 0.0001 * (g + 1)


def rejected_pricey(g):
    return 0, 0.010 * g, 0.010


def test_adaptive_rejects_gamma_max_below_one():
    with pytest.raises(ValueError):
        AdaptiveGamma(ControllerConfig(gamma_max=0))


def test_adaptive_first_choice_is_probe():
    ctrl = AdaptiveGamma(ControllerConfig(probe_gamma=3))
    assert ctrl.choose(8) == 3
    assert ctrl.choose(1) == 1  # clamped, still unmeasured
    assert ctrl.choose(0) == 0
    assert ctrl.draft_cost is None


def test_adaptive_observe_updates_hand_computed():
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=4, smoothing=0.5, fade=0.5, shrinkage=1.0, prior_acceptance=0.6))
    ctrl.observe(4, 2, 0.4, 1.0)  # two accepted, third rejected, fourth never judged
    assert ctrl.estimates.hits == [1, 1, 0] and ctrl.estimates.tries == [1, 1, 1]
    pooled = (2 + 0.6) / (3 + 1)  # every judged position, plus one pseudo-observation at the prior
    assert ctrl.alphas == pytest.approx([(1 + pooled) / 2, (1 + pooled) / 2, pooled / 2, pooled])
    assert ctrl.draft_cost == pytest.approx(0.1)
    assert ctrl.verify_cost(5) == ctrl.verify_cost(1) == pytest.approx(1.0)  # one size seen: flat
    ctrl.observe(4, 4, 0.2, 2.0, 0.5)  # all accepted; counts fade by half first; 0.5 s for 5 committed steps
    assert ctrl.estimates.hits == pytest.approx([1.5, 1.5, 1, 1]) and ctrl.estimates.tries == pytest.approx([1.5, 1.5, 1.5, 1])
    pooled = (5 + 0.6) / (5.5 + 1)
    assert ctrl.alphas == pytest.approx([(1.5 + pooled) / 2.5, (1.5 + pooled) / 2.5, (1 + pooled) / 2.5, (1 + pooled) / 2])
    assert ctrl.draft_cost == pytest.approx(0.5 * 0.1 + 0.5 * 0.05)
    assert ctrl.verify_cost(5) == pytest.approx((0.5 * 1.0 + 2.0) / 1.5)  # the decayed mean
    ctrl.observe(0, 0, 0.0, 0.7, 0.02)  # plain step: the 1-position verify cost and the commit cost are learnt
    assert ctrl.alphas[0] == pytest.approx((1.5 + pooled) / 2.5)
    assert ctrl.draft_cost == pytest.approx(0.075)
    # two sizes: the line through (1, 0.7) and (5, 5/3)
    assert ctrl.verify_cost(1) == pytest.approx(0.7) and ctrl.verify_cost(5) == pytest.approx(5 / 3)
    assert ctrl.verify_cost(3) == pytest.approx(0.7 + 2 * (5 / 3 - 0.7) / 4)


@pytest.mark.parametrize("per_pass,per_step", [(0.0, 0.003), (0.004, 0.0005), (0.002, 0.0)])
def test_adaptive_fits_the_commit_cost_per_pass_and_per_step(per_pass, per_step):
    """A fine stage completing frames one by one costs per step; one completing a pass's frames as
    a batch, about per pass: the fit tells them apart, and the choice of γ follows."""
    ctrl = AdaptiveGamma(ControllerConfig())
    rng = random.Random(1)
    for _ in range(200):
        accepted = rng.randint(0, 4)
        ctrl.observe(4, accepted, 0.004, 0.01, per_pass + per_step * (accepted + 1))
    for steps in (1, 3, 5):
        assert ctrl.commit_cost(steps) == pytest.approx(per_pass + per_step * steps, rel=1e-6, abs=1e-9)


def test_adaptive_acceptance_estimate_is_steady():
    """True acceptance 0.7 at every position: a per-position moving average of 0/1 outcomes read
    it as 0.59-0.99 (deep positions are judged rarely); the pooled, shrunk counts stay close."""
    rng = random.Random(0)
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=8))
    for _ in range(2000):
        g = ctrl.choose(8) or 1
        a = 0
        while a < g and rng.random() < 0.7:
            a += 1
        ctrl.observe(g, a, 0.001 * g, 0.01)
    assert all(abs(x - 0.7) < 0.1 for x in ctrl.alphas), ctrl.alphas


def test_adaptive_estimates_are_shared_through_memory():
    memory = ControllerMemory()
    first = AdaptiveGamma(ControllerConfig(), estimates=memory.estimates("sampling"))
    run(first, 40, perfect_cheap)
    later = AdaptiveGamma(ControllerConfig(), estimates=memory.estimates("sampling"))
    assert later.choose(8) == 8  # no probe, no climb: it starts where the first request ended
    fresh = AdaptiveGamma(ControllerConfig(), estimates=memory.estimates("greedy"))
    assert fresh.choose(8) == fresh.config.probe_gamma  # another setting learns on its own


def test_best_gamma_charges_committed_steps():
    """Work per committed step (a fine stage) is paid whatever γ is: it lowers every rate, and the
    choice is the brute-force best of (expected steps) / (drafts + pass + steps × commit cost)."""
    alphas, verify = [0.7] * 8, (lambda n: 0.010 + 0.001 * n)
    for a, b in ((0.0, 0.0), (0.0, 0.003), (0.0, 0.02), (0.01, 0.0)):
        commit = lambda steps, a=a, b=b: a + b * steps  # noqa: E731
        g = best_gamma(alphas, 0.002, verify, 8, commit_cost=commit)
        rate = lambda h: expected_steps(alphas, h) / step_cost(h, 0.002, verify, commit, expected_steps(alphas, h))  # noqa: E731
        assert rate(g) == pytest.approx(max(rate(h) for h in range(9)))
    assert step_cost(2, 0.002, verify, lambda s: 0.003 * s, 2.19) == pytest.approx(2 * 0.002 + 0.013 + 0.003 * 2.19)
    # the same seconds per pass instead of per step favour longer drafts
    per_step = best_gamma(alphas, 0.001, verify, 8, commit_cost=lambda s: 0.006 * s)
    per_pass = best_gamma(alphas, 0.001, verify, 8, commit_cost=lambda s: 0.006 * 2.0)
    assert per_pass >= per_step


def test_adaptive_perfect_cheap_drafter_goes_to_max():
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=8))
    hist = run(ctrl, 40, perfect_cheap)
    assert hist[0] == ctrl.config.probe_gamma
    assert hist[-10:] == [8] * 10
    assert ctrl.choose(8) == 8
    assert ctrl.choose(5) == 5


def test_adaptive_useless_drafter_switches_off():
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=8, probe_every=16))
    hist = run(ctrl, 10, rejected_pricey)
    assert hist[0] == 2  # the initial measurement
    assert hist[1:] == [0] * 9


@pytest.mark.parametrize("probe_every", [1, 3, 5, 16])
def test_adaptive_probes_while_off(probe_every):
    cfg = ControllerConfig(gamma_max=8, probe_every=probe_every, probe_gamma=2)
    ctrl = AdaptiveGamma(cfg)
    hist = run(ctrl, 1 + 4 * probe_every, rejected_pricey)
    # initial probe, then (probe_every - 1) plain steps and a probe, over and over
    cycle = [0] * (probe_every - 1) + [2]
    assert hist == [2] + cycle * 4


def test_adaptive_probe_respects_limit():
    ctrl = AdaptiveGamma(ControllerConfig(probe_every=2, probe_gamma=4))
    assert ctrl.choose(8) == 4
    ctrl.observe(4, 0, 0.04, 0.01)
    assert [ctrl.choose(3) for _ in range(4)] == [0, 3, 0, 3]
    # with limit 0 no probe happens, and the count does not fire a probe later either
    ctrl2 = AdaptiveGamma(ControllerConfig(probe_every=2, probe_gamma=4))
    run(ctrl2, 1, rejected_pricey)
    assert [ctrl2.choose(0) for _ in range(5)] == [0] * 5


def test_adaptive_comes_back_after_drafter_improves():
    cfg = ControllerConfig(gamma_max=8, probe_every=4)
    ctrl = AdaptiveGamma(cfg)
    off = run(ctrl, 20, rejected_pricey)
    assert off[1:] == ([0, 0, 0, 2] * 5)[:19]  # off, probing every 4th choice
    hist = run(ctrl, 200, perfect_cheap)
    assert hist[-10:] == [8] * 10


def test_adaptive_never_exceeds_limit():
    rng = random.Random(2)
    for seed in range(5):
        gmax = rng.randint(2, 8)  # >= probe_gamma; see test_adaptive_probe_beyond_gamma_max
        ctrl = AdaptiveGamma(ControllerConfig(gamma_max=gmax, probe_every=rng.randint(1, 6)))
        quality = rng.random()
        for _ in range(150):
            limit = rng.randint(0, 10)
            g = ctrl.choose(limit)
            assert 0 <= g <= min(limit, gmax)
            acc = 0
            while acc < g and rng.random() < quality:
                acc += 1
            ctrl.observe(g, acc, rng.uniform(0, 0.01) * g, rng.uniform(0.005, 0.02))


def test_adaptive_probe_beyond_gamma_max():
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=1, probe_gamma=2))
    g = ctrl.choose(8)
    ctrl.observe(g, g, 0.001 * g, 0.01)  # IndexError when g=2 and both drafts accepted
    assert g <= 1


def _predicted(ctrl: AdaptiveGamma, g: int) -> float:
    return step_cost(g, ctrl.draft_cost, ctrl.verify_cost)


def test_adaptive_time_cap_respected_when_on():
    # draft 1 ms/step, verify 10 ms flat; perfect drafter: uncapped it goes to 8 (see
    # perfect_cheap). A cap of 13.5 ms admits g <= 3 (13 ms), and g=3 is the best of those.
    cap = 0.0135
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=8, time_cap_s=cap))
    drafter = lambda g: (g, 0.001 * g, 0.010)  # noqa: E731
    hist = []
    for _ in range(60):
        g = ctrl.choose(8)
        if ctrl.draft_cost is not None and len(hist) > 0:
            assert g == 0 or _predicted(ctrl, g) <= cap
        hist.append(g)
        ctrl.observe(g, *drafter(g))
    assert hist[-5:] == [3] * 5


def test_adaptive_finds_optimum_for_perfect_moderate_drafter():
    # perfect drafter, 5 ms/step, verify 10 ms flat. True rates (steps/s):
    # γ=1 2/.015=133, γ=2 3/.020=150, ..., γ=8 9/.050=180 -> the optimum is 8. Positions
    # beyond the chosen γ are never observed directly; the controller must still climb there.
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=8))
    hist = run(ctrl, 300, lambda g: (g, 0.005 * g, 0.010))
    assert hist[-1] == 8


def test_adaptive_time_cap_random():
    rng = random.Random(3)
    for _ in range(20):
        cap = rng.uniform(0.012, 0.05)
        ctrl = AdaptiveGamma(ControllerConfig(gamma_max=8, time_cap_s=cap, probe_every=10**9))
        dc, quality = rng.uniform(0.0005, 0.01), rng.uniform(0.3, 1.0)
        for i in range(80):
            g = ctrl.choose(8)
            if i > 0:  # after the unavoidable first measurement, and with probes disabled
                assert g == 0 or _predicted(ctrl, g) <= cap
            acc = 0
            while acc < g and rng.random() < quality:
                acc += 1
            ctrl.observe(g, acc, dc * g * rng.uniform(0.8, 1.2), 0.01 + 0.0005 * (g + 1))


def test_adaptive_time_cap_respected_by_probes():
    # verify 10 ms, draft 5 ms/step, cap 12 ms: no γ >= 1 fits (γ=1 costs 15 ms), so the
    # controller is off. Its probes (γ=2 would be predicted at 20 ms) would exceed the cap it promises
    # never to plan above ("per-step latency budget; never plan a step above it") — they must not.
    cap = 0.012
    ctrl = AdaptiveGamma(ControllerConfig(gamma_max=8, time_cap_s=cap, probe_every=4))
    ctrl.choose(8)
    ctrl.observe(2, 2, 0.010, 0.010)
    for _ in range(20):
        g = ctrl.choose(8)
        assert g == 0 or _predicted(ctrl, g) <= cap
        ctrl.observe(g, g, 0.005 * g, 0.010)


# --------------------------------------------------------------------------- verify_cost


def vc(observed: list[tuple[int, float]], keep: float = 0.95):
    ctrl = AdaptiveGamma(verify=CostLine())
    for n, seconds in observed:
        ctrl.estimates.verify.add(n, seconds, keep)
    return ctrl.verify_cost


def test_verify_cost_unmeasured_default():
    assert vc([])(1) == 1.0
    assert vc([])(7) == 1.0


def test_verify_cost_one_size_is_flat_both_ways():
    f = vc([(3, 0.02)] * 5)
    assert f(3) == pytest.approx(0.02)
    assert f(1) == pytest.approx(0.02) and f(9) == pytest.approx(0.02)


def test_verify_cost_is_a_line_through_every_size():
    f = vc([(n, 0.01 + 0.002 * n) for n in (1, 5, 2, 9, 3)] * 4)
    for n in (1, 4, 12):
        assert f(n) == pytest.approx(0.01 + 0.002 * n)
    g = vc([(1, 2.0), (3, 1.0)] * 3)  # decreasing: flat at the decayed mean
    assert g(1) == pytest.approx(g(5)) and 1.0 < g(2) < 2.0
    h = vc([(2, 0.1), (6, 1.1)] * 3)  # through the origin or below: proportional
    assert h(1) == pytest.approx(h(2) / 2) and h(6) > h(2)


def test_verify_cost_reads_recent_passes_of_every_size_on_one_time_base():
    """A size measured in a slow minute is not kept at that cost: the line follows the recent
    passes of other sizes (per-size averages kept 13 ms for a size last seen in a slow minute
    while the others read 8)."""
    f = vc([(2, 0.013)] * 50 + [(n, 0.008) for n in (4, 5, 6)] * 40)
    assert f(2) == pytest.approx(0.008, rel=0.05)


def test_verify_cost_forgets_other_sizes_and_goes_flat():
    """Passes of one size only, long enough: the slope is no longer known and is read as flat, so
    the controller tries the other sizes again instead of trusting an old slope."""
    f = vc([(2, 0.01), (6, 0.03)] * 10 + [(4, 0.02)] * 200)
    assert f(2) == pytest.approx(f(8)) == pytest.approx(0.02)


# --------------------------------------------------------------------------- FixedGamma


# --------------------------------------------------------------------------- trees


def chain_and_tree(tree_steps: float, tree_draft: float = 0.001):
    """A synthetic drafter: chains accepted at 0.6 a position (expected), a tree committing
    ``tree_steps`` per pass; a draft step costs 1 ms (the tree ``tree_draft`` per depth), a pass
    10 ms + 0.1 ms per slot. Returns ``(plan) -> (drafted, accepted, draft_s, verify_s, tree, slots)``."""
    rng = random.Random(0)

    def step(plan):
        if isinstance(plan, tuple):
            accepted = int(tree_steps - 1) + (rng.random() < tree_steps % 1)
            slots = 1 + sum(2 ** min(i + 1, 2) for i in range(len(plan)))  # (2, 2, 1, 1): 1 + 2 + 4 + 4 + 4
            return len(plan), min(accepted, len(plan)), tree_draft * len(plan), 0.010 + 0.0001 * slots, plan, slots
        accepted = 0
        while accepted < plan and rng.random() < 0.6:
            accepted += 1
        return plan, accepted, 0.001 * plan, 0.010 + 0.0001 * (plan + 1), None, 0
    return step


def drive(ctrl: AdaptiveGamma, steps: int, drafter, limit: int = 8) -> list:
    out = []
    for _ in range(steps):
        plan = ctrl.choose(limit)
        out.append(plan)
        drafted, accepted, draft_s, verify_s, tree, slots = drafter(plan)
        ctrl.observe(drafted, accepted, draft_s, verify_s, tree=tree, slots=slots)
    return out


def test_a_tree_that_commits_more_per_pass_wins_over_the_chain():
    tree = (2, 2, 1, 1)
    cfg = ControllerConfig(probe_every=4, tree_probe=3)
    ctrl = AdaptiveGamma(cfg, trees=(tree,))
    plans = drive(ctrl, 120, chain_and_tree(4.6))
    first = plans.index(tree)
    assert all(isinstance(p, int) for p in plans[:first]) and first >= cfg.probe_every  # probed after some chain steps
    assert plans[first: first + 3] == [tree] * 3  # a probe is a few passes in a row
    late = plans[-64:]
    chains = [i for i, p in enumerate(late) if p != tree]
    # The tree wins; every 16 steps the chain is probed again for 3 passes (a chain step of γ > 0).
    assert 3 <= len(chains) <= 3 * (64 // 16 + 1) and all(late[i] > 0 for i in chains)
    est = ctrl.estimates.trees[tree]
    assert 4.0 < est.mean_steps(0.0, 0.0) <= 5.0 and 0.9 < est.draft_ratio < 1.1


def test_a_tree_that_does_not_pay_is_only_probed_now_and_then():
    tree = (2, 2, 1, 1)
    cfg = ControllerConfig(probe_every=4, tree_probe=2)
    ctrl = AdaptiveGamma(cfg, trees=(tree,))
    plans = drive(ctrl, 120, chain_and_tree(1.2, tree_draft=0.004))
    trees = [i for i, p in enumerate(plans) if p == tree]
    assert trees and len(trees) <= 2 * (1 + 120 // (4 * cfg.probe_every))  # the first probe, then one every 16 chain steps
    assert all(isinstance(p, int) and p > 0 for i, p in enumerate(plans[1:], 1) if i not in trees)
    # Without trees (a drafter that drafts none) the controller never proposes one, whatever its config says.
    plain = AdaptiveGamma(replace(cfg, trees=(tree,)))
    assert all(isinstance(p, int) for p in drive(plain, 60, chain_and_tree(4.6)))


def test_the_candidate_trees_are_the_drafters_unless_the_config_names_others():
    mine, theirs = ((3,), (2, 1, 0)), (2, 2, 1, 1)
    assert AdaptiveGamma(ControllerConfig(), trees=(mine,)).trees == (mine,)
    assert AdaptiveGamma(ControllerConfig(trees=(theirs,)), trees=(mine,)).trees == (theirs,)
    assert ControllerConfig(trees=([[3], [2, 1, 0]],)).trees == (mine,)  # checked, in the one form
    assert AdaptiveGamma(ControllerConfig(), trees=([[3], [2, 1, 0]],)).trees == (mine,)  # hashable keys
    with pytest.raises(ValueError, match="tree"):
        AdaptiveGamma(ControllerConfig(), trees=((0, 1),))


def test_a_tree_is_never_deeper_than_the_limit_nor_past_the_time_cap():
    tree = (2, 2, 1, 1)
    ctrl = AdaptiveGamma(ControllerConfig(probe_every=1, tree_probe=1), trees=(tree,))
    drive(ctrl, 40, chain_and_tree(4.6))
    assert ctrl.choose(8) == tree and ctrl.choose(3) != tree
    capped = AdaptiveGamma(ControllerConfig(probe_every=1, tree_probe=1, time_cap_s=0.0125),
                           estimates=ctrl.estimates, trees=(tree,))
    assert ctrl.tree_rate(tree) > 0 and capped.tree_rate(tree) == 0.0  # its pass costs more than 12.5 ms
    capped.observe(2, 1, 0.002, 0.0105, batch=1)  # alone, so only the cap keeps the tree out
    assert all(p != tree for p in [capped.choose(8) for _ in range(5)])
    # Before its first pass a request is not known to decode alone; in a batched pass a tree
    # widens every row to its slots: trees are for a request decoding alone.
    assert isinstance(AdaptiveGamma(ctrl.config, estimates=ctrl.estimates, trees=(tree,)).choose(8), int)
    ctrl.observe(4, 2, 0.004, 0.011, slots=14, batch=2)
    assert all(isinstance(ctrl.choose(8), int) for _ in range(10))
    ctrl.observe(4, 2, 0.004, 0.011, batch=1)
    assert tree in [ctrl.choose(8) for _ in range(5)]


def test_the_tree_or_chain_in_use_keeps_its_place_within_the_switch_margin():
    """Rates within ``switch_margin`` of each other do not swap the tree and the chain (their
    noisy estimates crossed back and forth); a clear lead does, either way."""
    tree = (2, 2, 1, 1)
    ctrl = AdaptiveGamma(ControllerConfig(probe_every=1000, tree_probe=1, switch_margin=0.05), trees=(tree,))
    drive(ctrl, 20, chain_and_tree(4.6))  # measured: the tree's record exists, no probe is due
    ctrl.estimates.probing, ctrl.estimates.since_probe = None, 0
    ctrl.best = lambda limit: (4, 100.0)  # the best chain: γ=4 at 100 steps/s
    cases = [(True, 97.0, tree), (True, 94.0, 4), (False, 104.0, 4), (False, 106.0, tree)]  # (tree in use, tree's rate, choice)
    for in_use, tree_rate, expected in cases:
        ctrl.estimates.tree_in_use = in_use
        ctrl.tree_rate = lambda t, r=tree_rate: r
        assert ctrl.choose(8) == expected, (in_use, tree_rate)
        assert ctrl.estimates.tree_in_use == (expected == tree)
    with pytest.raises(ValueError, match="switch_margin"):
        ControllerConfig(switch_margin=1.0)


def test_one_unlucky_tree_pass_does_not_rule_the_tree_out():
    est = TreeEstimate()
    est.steps, est.passes = 1.0, 1.0
    assert est.mean_steps(3.0, 4.0) == pytest.approx(2.6)
    with pytest.raises(ValueError):
        ControllerConfig(trees=((0, 1),))


def test_fixed_gamma():
    with pytest.raises(ValueError):
        FixedGamma(-1)
    f = FixedGamma(4)
    assert f.choose(8) == 4
    assert f.choose(4) == 4
    assert f.choose(2) == 2
    assert f.choose(0) == 0
    f.observe(4, 0, 1.0, 1.0)  # no-op
    assert f.choose(8) == 4
    assert FixedGamma(0).choose(8) == 0


def test_the_choice_settles_on_the_candidate_that_pays_and_keeps_probing_the_others():
    """Synthetic costs (no clock): "good" is always accepted at a tenth of a pass per drafted step,
    "bad" never, at the same cost. Each is tried first; then "good" drafts nearly every step and
    "bad" only on the periodic probes."""
    from voicespec.engine.drafters.choice import ChoiceSession

    session = ChoiceSession({"bad": None, "good": None}, ControllerConfig())
    for _ in range(300):
        gamma = session.choose(100)
        good = session.active == "good"
        session.observe(gamma, gamma if good else 0, 0.1 * gamma, 1.0 + 0.05 * gamma)
    assert set(session.chosen[:2]) == {"bad", "good"}
    later = session.chosen[50:]
    assert later.count("good") > 0.9 * len(later)
    assert 0 < later.count("bad") <= len(later) / ControllerConfig().probe_every + 1


def test_the_candidates_of_auto_share_one_verify_line():
    """The target's pass does not depend on who drafted: a pass observed through one candidate is
    the other's estimate too, and only the drafting candidate learns a draft cost."""
    choice = ChoiceSession({"a": object(), "b": object()}, ControllerConfig())
    a, b = choice.controllers["a"], choice.controllers["b"]
    assert a.estimates.verify is b.estimates.verify
    a.observe(2, 1, 0.002, 0.010)
    assert b.verify_cost(3) == pytest.approx(0.010) and a.draft_cost == pytest.approx(0.001) and b.draft_cost is None
