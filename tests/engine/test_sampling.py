"""The warpers as pure functions, checked by hand and against transformers' own processors."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import (
    LogitsProcessorList,
    RepetitionPenaltyLogitsProcessor,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from voicespec.engine.config import SamplingConfig
from voicespec.engine.sampling import (
    apply_repetition_penalty,
    draw_uniforms,
    recent_tokens,
    sample,
    top_k_filter,
    top_p_filter,
    warp,
)

NEG = float("-inf")
DUMMY_IDS = torch.zeros(1, 1, dtype=torch.long)  # HF warpers other than the penalty ignore input_ids


def rand_logits(gen: torch.Generator, T=3, G=2, V=40, scale=3.0) -> torch.Tensor:
    return torch.randn(T, G, V, generator=gen) * scale


# --------------------------------------------------------------------------- SamplingConfig


@pytest.mark.parametrize(
    "kwargs",
    [
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"top_p": 0.0},
        {"top_p": -0.5},
        {"top_p": 1.01},
        {"top_p": float("nan")},
        {"repetition_penalty": 0.99},
        {"repetition_penalty": 0.0},
        {"repetition_penalty": float("nan")},
        {"top_k": -1},
        {"repetition_window": -1},
    ],
)
def test_config_rejects_invalid(kwargs):
    with pytest.raises(ValueError):
        SamplingConfig(**kwargs)


def test_config_valid_and_properties():
    assert SamplingConfig().greedy is False
    assert SamplingConfig(temperature=0).greedy is True
    SamplingConfig(temperature=0.5, top_k=5, top_p=1.0, repetition_penalty=1.0, repetition_window=0)
    SamplingConfig(top_p=1e-6)
    assert not SamplingConfig(repetition_penalty=1.3).uses_history  # window 0
    assert not SamplingConfig(repetition_window=8).uses_history  # penalty 1
    assert SamplingConfig(repetition_penalty=1.3, repetition_window=8).uses_history


# --------------------------------------------------------------------------- top-k / top-p vs HF


def hf_rows(proc, x: torch.Tensor, input_ids: torch.Tensor = DUMMY_IDS) -> torch.Tensor:
    """Apply an HF processor to ``[..., V]`` logits row by row as a ``[B, V]`` batch."""
    flat = x.reshape(-1, x.shape[-1]).clone()
    return proc(input_ids.expand(flat.shape[0], -1), flat).reshape(x.shape)


@pytest.mark.parametrize("k", [1, 2, 5, 17, 39])
def test_top_k_matches_hf(k):
    gen = torch.Generator().manual_seed(k)
    for _ in range(20):
        x = rand_logits(gen)
        ours = top_k_filter(x, k)
        theirs = hf_rows(TopKLogitsWarper(k), x)
        assert torch.equal(torch.isfinite(ours), torch.isfinite(theirs))
        assert torch.equal(ours, theirs)
        assert (torch.isfinite(ours).sum(-1) == k).all()


def test_top_k_disabled_and_oversized():
    x = rand_logits(torch.Generator().manual_seed(0), V=10)
    assert torch.equal(top_k_filter(x, 0), x)
    assert torch.equal(top_k_filter(x, 10), x)
    assert torch.equal(top_k_filter(x, 50), x)


def test_top_k_keeps_ties():
    x = torch.tensor([[[3.0, 1.0, 3.0, 2.0]]])
    assert torch.isfinite(top_k_filter(x, 1)).tolist() == [[[True, False, True, False]]]


@pytest.mark.parametrize("p", [0.05, 0.3, 0.5, 0.77, 0.9, 0.99])
def test_top_p_matches_hf(p):
    gen = torch.Generator().manual_seed(int(p * 1000))
    compared = 0
    for scale in (0.5, 2.0, 6.0):
        for _ in range(15):
            x = rand_logits(gen, scale=scale)
            # skip rows where the mass above some id is within float noise of p: there the two
            # formulations (cumsum descending vs 1 - cumsum ascending) may round differently
            s = torch.sort(x, -1, descending=True).values.softmax(-1)
            near = ((s.cumsum(-1) - s - p).abs() < 1e-5).any(-1)
            ours = torch.isfinite(top_p_filter(x, p))
            theirs = torch.isfinite(hf_rows(TopPLogitsWarper(p), x))
            assert torch.equal(ours[~near], theirs[~near])
            compared += int((~near).sum())
    assert compared > 200


def test_top_p_documented_semantics():
    # probs .5 .3 .2 (logits are their logs): the mass above each id is 0, .5, .8.
    x = torch.tensor([0.5, 0.3, 0.2]).log().view(1, 1, 3)
    keep = lambda p: torch.isfinite(top_p_filter(x, p)).view(-1).tolist()  # noqa: E731
    assert keep(0.1) == [True, False, False]
    assert keep(0.49) == [True, False, False]
    assert keep(0.51) == [True, True, False]
    assert keep(0.8) == [True, True, False]
    assert keep(0.81) == [True, True, True]
    assert keep(1.0) == [True, True, True]
    # always at least one id, even for a tiny p
    assert keep(1e-9) == [True, False, False]


def test_top_p_exact_threshold():
    # uniform over 4: probabilities exactly .25, mass above the sorted ids exactly 0 .25 .5 .75.
    # An id whose mass above already *reaches* p is dropped (so p = .5 keeps 2 ids, not 3).
    x = torch.zeros(1, 1, 4)
    kept = lambda p: int(torch.isfinite(top_p_filter(x, p)).sum())  # noqa: E731
    assert kept(0.25) == 1
    assert kept(0.2500001) == 2
    assert kept(0.5) == 2
    assert kept(0.75) == 3
    assert kept(0.7500001) == 4
    # transformers agrees on these exact boundaries
    hf = lambda p: int(torch.isfinite(TopPLogitsWarper(p)(DUMMY_IDS, x[0].clone())).sum())  # noqa: E731
    assert [hf(p) for p in (0.25, 0.5, 0.75)] == [1, 2, 3]


def test_top_p_ignores_masked_ids():
    x = torch.tensor([[[2.0, NEG, 1.0, NEG, 0.0]]])
    out = top_p_filter(x, 0.95)
    assert torch.isneginf(out[0, 0, [1, 3]]).all()
    assert torch.isfinite(out[0, 0, 0])


# --------------------------------------------------------------------------- repetition penalty vs HF


@pytest.mark.parametrize("penalty", [1.1, 1.5, 3.0])
def test_repetition_penalty_matches_hf(penalty):
    gen = torch.Generator().manual_seed(int(penalty * 10))
    T, G, V, W = 4, 3, 12, 5
    for _ in range(10):
        x = rand_logits(gen, T, G, V)
        recent = torch.randint(-1, V, (T, W, G), generator=gen)  # -1 = missing, duplicates allowed
        ours = apply_repetition_penalty(x, recent, penalty)
        proc = RepetitionPenaltyLogitsProcessor(penalty=float(penalty))
        for t in range(T):
            for g in range(G):
                ids = recent[t, :, g]
                ids = ids[ids >= 0]
                if ids.numel() == 0:
                    want = x[t, g]
                else:
                    want = proc(ids.unsqueeze(0), x[t, g].unsqueeze(0).clone())[0]
                assert torch.equal(ours[t, g], want), (t, g)


def test_repetition_penalty_hand():
    x = torch.tensor([[[2.0, -2.0, 1.0, -1.0], [2.0, -2.0, 1.0, -1.0]]])  # T=1, G=2, V=4
    recent = torch.tensor([[[0, 3], [1, 3], [-1, -1]]])  # [T=1, W=3, G=2]
    out = apply_repetition_penalty(x, recent, 2.0)
    # group 0 saw ids 0, 1; group 1 saw id 3 (twice: penalised once)
    assert out.tolist() == [[[1.0, -4.0, 1.0, -1.0], [2.0, -2.0, 1.0, -2.0]]]


def test_repetition_penalty_noops():
    x = rand_logits(torch.Generator().manual_seed(0))
    recent = torch.zeros(3, 4, 2, dtype=torch.long)
    assert torch.equal(apply_repetition_penalty(x, recent, 1.0), x)
    assert torch.equal(apply_repetition_penalty(x, recent[:, :0], 2.0), x)
    assert torch.equal(apply_repetition_penalty(x, torch.full((3, 4, 2), -1), 2.0), x)


# --------------------------------------------------------------------------- recent_tokens


def test_recent_tokens_hand():
    history = torch.tensor([[1, 10], [2, 20], [3, 30]])  # N=3, G=2
    block = torch.tensor([[4, 40], [5, 50]])  # T=2
    out = recent_tokens(history, block, 2)
    assert out.shape == (3, 2, 2)
    assert out.tolist() == [
        [[2, 20], [3, 30]],
        [[3, 30], [4, 40]],
        [[4, 40], [5, 50]],
    ]
    # window longer than the history: padded with -1 at the front
    out = recent_tokens(history, block, 4)
    assert out.tolist() == [
        [[-1, -1], [1, 10], [2, 20], [3, 30]],
        [[1, 10], [2, 20], [3, 30], [4, 40]],
        [[2, 20], [3, 30], [4, 40], [5, 50]],
    ]


def test_recent_tokens_empty_history_and_block():
    empty = torch.zeros(0, 2, dtype=torch.long)
    block = torch.tensor([[4, 40]])
    assert recent_tokens(empty, block, 2).tolist() == [[[-1, -1], [-1, -1]], [[-1, -1], [4, 40]]]
    history = torch.tensor([[1, 10], [2, 20]])
    assert recent_tokens(history, empty, 3).tolist() == [[[-1, -1], [1, 10], [2, 20]]]


def test_recent_tokens_window_zero():
    history = torch.tensor([[1, 10], [2, 20]])
    block = torch.tensor([[4, 40], [5, 50], [6, 60]])
    out = recent_tokens(history, block, 0)
    assert out.shape == (4, 0, 2)


def test_recent_tokens_matches_naive():
    gen = torch.Generator().manual_seed(0)
    for N in (0, 1, 3, 9):
        for T in (0, 1, 4):
            for W in (0, 1, 2, 5, 12):
                G = 3
                history = torch.randint(0, 50, (N, G), generator=gen)
                block = torch.randint(0, 50, (T, G), generator=gen)
                out = recent_tokens(history, block, W)
                assert out.shape == (T + 1, W, G)
                seq = [r.tolist() for r in history] + [r.tolist() for r in block]
                for i in range(T + 1):
                    prefix = seq[: N + i][-W:] if W else []
                    want = [[-1] * G] * (W - len(prefix)) + prefix
                    assert out[i].tolist() == want


# --------------------------------------------------------------------------- warp


def test_warp_masks_ids():
    gen = torch.Generator().manual_seed(0)
    x = rand_logits(gen)
    mask = torch.rand(x.shape, generator=gen) > 0.4
    mask[..., 0] = True
    for cfg in (SamplingConfig(), SamplingConfig(temperature=0), SamplingConfig(temperature=0.7, top_k=30)):
        out = warp(x, mask, cfg)
        assert torch.isneginf(out[~mask]).all()
    # penalty on masked ids keeps them at -inf
    recent = torch.randint(0, x.shape[-1], (x.shape[0], 4, x.shape[1]), generator=gen)
    out = warp(x, mask, SamplingConfig(repetition_penalty=2.0, repetition_window=4), recent)
    assert torch.isneginf(out[~mask]).all()
    assert torch.isfinite(out[mask]).all()


def test_warp_does_not_mutate_input():
    x = rand_logits(torch.Generator().manual_seed(0))
    before = x.clone()
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[..., :3] = False
    recent = torch.zeros(3, 2, 2, dtype=torch.long)
    cfg = SamplingConfig(temperature=0.5, top_k=5, top_p=0.5, repetition_penalty=2.0, repetition_window=2)
    warp(x, mask, cfg, recent)
    assert torch.equal(x, before)


def test_warp_greedy_skips_temperature_topk_topp():
    x = rand_logits(torch.Generator().manual_seed(1))
    mask = torch.ones_like(x, dtype=torch.bool)
    mask[..., 5] = False
    cfg = SamplingConfig(temperature=0, top_k=1, top_p=0.01)
    out = warp(x, mask, cfg)
    assert torch.equal(out, x.masked_fill(~mask, NEG))
    # the penalty still applies under greedy
    recent = torch.full((3, 2, 2), 7)
    cfg = SamplingConfig(temperature=0, top_k=1, repetition_penalty=2.0, repetition_window=2)
    out = warp(x, mask, cfg, recent)
    assert torch.equal(out, apply_repetition_penalty(x.masked_fill(~mask, NEG), recent, 2.0))


def test_warp_matches_hf_pipeline():
    gen = torch.Generator().manual_seed(2)
    T, G, V, W = 3, 2, 30, 4
    cases = [(0.7, 10, 0.9, 1.3), (1.3, 0, 0.6, 2.0), (1.0, 5, 1.0, 1.0), (0.4, 25, 0.97, 1.1)]
    for temp, k, p, pen in cases:
        cfg = SamplingConfig(temperature=temp, top_k=k, top_p=p, repetition_penalty=pen, repetition_window=W)
        for _ in range(5):
            x = rand_logits(gen, T, G, V)
            mask = torch.rand(x.shape, generator=gen) > 0.2
            mask[..., 0] = True
            recent = torch.randint(-1, V, (T, W, G), generator=gen)
            ours = warp(x, mask, cfg, recent)
            procs = [RepetitionPenaltyLogitsProcessor(float(pen)), TemperatureLogitsWarper(float(temp))]
            if k:
                procs.append(TopKLogitsWarper(k))
            if p < 1:
                procs.append(TopPLogitsWarper(p))
            pipe = LogitsProcessorList(procs)
            for t in range(T):
                for g in range(G):
                    ids = recent[t, :, g]
                    ids = ids[ids >= 0]
                    if ids.numel() == 0:
                        ids = torch.tensor([V])  # out of vocab: HF clamps and drops it
                    row = x[t, g].masked_fill(~mask[t, g], NEG).unsqueeze(0)
                    want = pipe(ids.unsqueeze(0), row)[0]
                    assert torch.equal(torch.isfinite(ours[t, g]), torch.isfinite(want))
                    fin = torch.isfinite(want)
                    torch.testing.assert_close(ours[t, g][fin], want[fin])


def test_warp_order_penalty_before_top_k():
    # id 0 leads (3.0 vs 2.9) but was just used: penalised to 1.5 it falls out of the top-1.
    x = torch.tensor([[[3.0, 2.9, 1.0, 0.0]]])
    mask = torch.ones_like(x, dtype=torch.bool)
    recent = torch.tensor([[[0]]])  # [T=1, W=1, G=1]
    cfg = SamplingConfig(temperature=1.0, top_k=1, repetition_penalty=2.0, repetition_window=1)
    out = warp(x, mask, cfg, recent)
    assert torch.isfinite(out).view(-1).tolist() == [False, True, False, False]


def test_warp_order_penalty_then_temperature():
    # The CTRL penalty looks only at the sign of a logit, and a positive temperature keeps the
    # sign, so penalty∘temperature == temperature∘penalty: the order is unobservable here and
    # we check the documented formula instead: (x / or * penalty) / temperature.
    x = torch.tensor([[[2.0, -2.0, 1.0]]])
    mask = torch.ones_like(x, dtype=torch.bool)
    recent = torch.tensor([[[0], [1]]])  # [T=1, W=2, G=1]
    cfg = SamplingConfig(temperature=0.5, repetition_penalty=4.0, repetition_window=2)
    out = warp(x, mask, cfg, recent)
    assert out.view(-1).tolist() == pytest.approx([2.0 / 4 / 0.5, -2.0 * 4 / 0.5, 1.0 / 0.5])


def test_warp_order_temperature_before_top_p():
    # logits 2,1,0: at T=1 probs .665 .245 .090 -> top_p .7 keeps {0, 1};
    # at T=.25 (logits 8,4,0) probs .982 .018 .0003 -> keeps {0} only.
    x = torch.tensor([[[2.0, 1.0, 0.0]]])
    mask = torch.ones_like(x, dtype=torch.bool)
    def keep(t):
        return torch.isfinite(warp(x, mask, SamplingConfig(temperature=t, top_p=0.7))).view(-1).tolist()

    assert keep(1.0) == [True, True, False]
    assert keep(0.25) == [True, False, False]


def test_warp_order_penalty_before_top_p():
    # probs of logits [1, 0.9, -3]: .519 .470 .010; with id 0 penalised to .5 id 1 leads and
    # top_p .5 keeps only id 1 (without the penalty it would keep only id 0).
    x = torch.tensor([[[1.0, 0.9, -3.0]]])
    mask = torch.ones_like(x, dtype=torch.bool)
    recent = torch.tensor([[[0]]])
    cfg = SamplingConfig(top_p=0.5, repetition_penalty=2.0, repetition_window=1)
    assert torch.isfinite(warp(x, mask, cfg, recent)).view(-1).tolist() == [False, True, False]
    assert torch.isfinite(warp(x, mask, SamplingConfig(top_p=0.5))).view(-1).tolist() == [True, False, False]


# --------------------------------------------------------------------------- sample


def test_sample_shape_and_support():
    gen = torch.Generator().manual_seed(0)
    probs = torch.rand(4, 3, 11, generator=gen)
    probs[..., ::2] = 0
    probs = probs / probs.sum(-1, keepdim=True)
    for _ in range(20):
        out = sample(probs, gen)
        assert out.shape == (4, 3)
        assert out.dtype == torch.long
        assert (out % 2 == 1).all()  # never a zero-probability id


def test_sample_one_hot():
    ids = torch.tensor([[3, 0], [9, 5]])
    probs = torch.nn.functional.one_hot(ids, 10).float()
    for seed in range(10):
        assert torch.equal(sample(probs, torch.Generator().manual_seed(seed)), ids)
    assert torch.equal(sample(probs, None), ids)


def test_sample_reproducible():
    probs = torch.softmax(torch.randn(5, 2, 50, generator=torch.Generator().manual_seed(0)), -1)
    a = [sample(probs, g) for g in [torch.Generator().manual_seed(7)] for _ in range(5)]
    b = [sample(probs, g) for g in [torch.Generator().manual_seed(7)] for _ in range(5)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    c = sample(probs, torch.Generator().manual_seed(8))
    assert not torch.equal(a[0], c)  # 10 draws over 50 ids: a different seed differs


def test_sample_frequencies():
    probs = torch.tensor([0.1, 0.6, 0.3]).expand(20000, 3)
    out = sample(probs, torch.Generator().manual_seed(0))
    freq = torch.bincount(out, minlength=3).float() / out.numel()
    assert torch.allclose(freq, torch.tensor([0.1, 0.6, 0.3]), atol=0.015)
    assert math.isclose(float(freq.sum()), 1.0)


@pytest.mark.parametrize("n", [0, 1, 3, 16, 17, 200])
def test_draw_uniforms_one_call_is_n_single_draws(n):
    """The fine stage draws a session's uniforms ahead in one call: they must be the draws one
    row at a time would make, and leave the generator where those would (the next draw agrees)."""
    a, b = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    ahead = draw_uniforms(a, n)
    one_by_one = [torch.rand(1, 1, generator=b) for _ in range(n)]
    assert ahead.shape == (n, 1)
    assert torch.equal(ahead, torch.cat(one_by_one) if n else torch.empty(0, 1))
    assert torch.equal(torch.rand(1, generator=a), torch.rand(1, generator=b))
    with torch.random.fork_rng():  # no generator: torch's global one, consumed the same way
        torch.manual_seed(5)
        ahead, after = draw_uniforms(None, n), torch.rand(1)
        torch.manual_seed(5)
        one_by_one = [torch.rand(1, 1) for _ in range(n)]
        assert torch.equal(ahead, torch.cat(one_by_one) if n else torch.empty(0, 1))
        assert torch.equal(after, torch.rand(1))
