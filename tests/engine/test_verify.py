"""The acceptance rules: property-based tests (hypothesis) of the acceptance math, the sampling
rule's output distribution on synthetic p and q, and the engine's cache invariant."""

from __future__ import annotations

import functools
from collections import Counter

import pytest
import torch

from voicespec.engine.kv_cache import KVCache
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from voicespec.engine.config import DecodeConfig, SamplingConfig

from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.engine.layout import Prompt
from voicespec.pipeline.tiny import TEXT_VOCAB, codec_draft, flat_draft, tiny_codec_lm, tiny_flat
from voicespec.engine.verify import residual, verify_greedy, verify_sampling

PROPS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# One entry of an unnormalised probability vector: exact zeros (masked ids), ties, arbitrary floats.
WEIGHT = st.one_of(
    st.just(0.0),
    st.integers(1, 4).map(float),
    st.floats(1e-3, 1.0, allow_nan=False, allow_infinity=False),
)


def prob_rows(draw, shape: tuple[int, ...], V: int) -> torch.Tensor:
    """Normalised rows ``[*shape, V]`` with exact zeros; every row has a positive entry."""
    n = 1
    for s in shape:
        n *= s
    rows = []
    for _ in range(n):
        w = draw(st.lists(WEIGHT, min_size=V, max_size=V))
        if not any(x > 0 for x in w):
            w[draw(st.integers(0, V - 1))] = draw(st.integers(1, 4).map(float))
        rows.append(w)
    t = torch.tensor(rows, dtype=torch.float32).reshape(*shape, V)
    return t / t.sum(-1, keepdim=True)


@st.composite
def sampling_case(draw):
    gamma, G, V = draw(st.integers(0, 6)), draw(st.integers(1, 3)), draw(st.integers(2, 6))
    p = prob_rows(draw, (gamma + 1, G), V)
    one_hot = draw(st.booleans())
    if one_hot:  # deterministic drafter: any id, legal or not
        q = None
        draft = torch.tensor(
            draw(st.lists(st.integers(0, V - 1), min_size=gamma * G, max_size=gamma * G)), dtype=torch.long
        ).reshape(gamma, G)
    else:
        q = prob_rows(draw, (gamma, G), V)
        ids = []
        for row in q.reshape(-1, V):
            support = row.nonzero().flatten().tolist()
            ids.append(draw(st.sampled_from(support)))
        draft = torch.tensor(ids, dtype=torch.long).reshape(gamma, G)
    seed = draw(st.integers(0, 2**32 - 1))
    return draft, q, p, seed


def _fell_back(p: torch.Tensor, q: torch.Tensor | None, tok: int) -> bool:
    if q is None:
        rest = p.clone()
        rest[tok] = 0
        return not bool(rest.sum() > 0)
    return not bool((p - q).clamp_min(0).sum() > 0)


@PROPS
@given(sampling_case())
def test_verify_sampling_structure(case):
    draft, q, p, seed = case
    gamma, G = draft.shape
    gen = torch.Generator().manual_seed(seed)
    v = verify_sampling(draft, q, p, gen)
    steps, a, m = v.steps, v.accepted_steps, v.accepted_tokens

    assert steps.shape == (a + 1, G)
    assert steps.dtype == torch.long
    assert 0 <= a <= gamma
    assert G * a <= m <= G * a + G - 1 and m <= G * gamma
    if a == gamma:
        assert m == G * gamma
    # every committed token is legal where it lands (p > 0 there)
    for i in range(a + 1):
        for k in range(G):
            assert p[i, k, steps[i, k]] > 0, (i, k)
    # the accepted prefix is the draft, whole steps then the leading codebooks of the partial one
    assert torch.equal(steps[:a], draft[:a])
    k = m % G
    if k:
        assert torch.equal(steps[a, :k], draft[a, :k])
    # accepted draft tokens had p > 0 (and q > 0 by construction)
    flat_draft_ids = draft.reshape(-1)
    flat_p = p[:gamma].reshape(-1, p.shape[-1])
    for j in range(m):
        assert flat_p[j, flat_draft_ids[j]] > 0
    # the rejected token is resampled from the residual, which excludes the draft token
    if m < gamma * G:
        i, k = divmod(m, G)
        tok = int(draft[i, k])
        qi = None if q is None else q[i, k]
        if not _fell_back(p[i, k], qi, tok):
            assert int(steps[i, k]) != tok


@settings(max_examples=50, deadline=None)
@given(sampling_case())
def test_verify_sampling_is_reproducible(case):
    draft, q, p, seed = case
    a = verify_sampling(draft, q, p, torch.Generator().manual_seed(seed))
    b = verify_sampling(draft, q, p, torch.Generator().manual_seed(seed))
    assert torch.equal(a.steps, b.steps) and a.accepted_tokens == b.accepted_tokens


@st.composite
def residual_case(draw):
    V = draw(st.integers(2, 6))
    p = prob_rows(draw, (), V)
    q = None if draw(st.booleans()) else prob_rows(draw, (), V)
    tok = draw(st.integers(0, V - 1))
    return p, q, tok


@PROPS
@given(residual_case())
def test_residual_is_a_distribution_inside_p_support(case):
    p, q, tok = case
    r = residual(p, q, tok)
    assert r.shape == p.shape
    assert bool((r >= 0).all())
    assert abs(float(r.sum()) - 1) < 1e-5
    assert bool((r[p == 0] == 0).all())
    if _fell_back(p, q, tok):
        assert torch.equal(r, p)
    elif q is None:
        assert r[tok] == 0
        rest = p.clone()
        rest[tok] = 0
        torch.testing.assert_close(r, rest / rest.sum())
    else:
        assert bool((r[p <= q] == 0).all())
        d = (p - q).clamp_min(0)
        torch.testing.assert_close(r, d / d.sum())


@st.composite
def greedy_case(draw):
    gamma, G, V = draw(st.integers(0, 6)), draw(st.integers(1, 3)), draw(st.integers(2, 6))
    n = (gamma + 1) * G
    rows = []
    for _ in range(n):
        # small integers make ties common; -inf marks illegal ids (at least one finite per row)
        row = draw(st.lists(st.one_of(st.integers(-3, 3).map(float), st.just(float("-inf"))), min_size=V, max_size=V))
        if all(x == float("-inf") for x in row):
            row[draw(st.integers(0, V - 1))] = float(draw(st.integers(-3, 3)))
        rows.append(row)
    logits = torch.tensor(rows, dtype=torch.float32).reshape(gamma + 1, G, V)
    best = logits.argmax(-1)
    mode = draw(st.sampled_from(["argmax", "perturbed", "random"]))
    if mode == "random":
        draft = torch.tensor(draw(st.lists(st.integers(0, V - 1), min_size=gamma * G, max_size=gamma * G)))
        draft = draft.reshape(gamma, G).long()
    else:
        draft = best[:gamma].clone()
        if mode == "perturbed" and gamma:
            j = draw(st.integers(0, gamma * G - 1))
            flat = draft.reshape(-1)
            flat[j] = draw(st.integers(0, V - 1))
    return draft, logits, mode


@PROPS
@given(greedy_case())
def test_verify_greedy_commits_the_argmax(case):
    draft, logits, mode = case
    gamma, G = draft.shape
    best = logits.argmax(-1)
    v = verify_greedy(draft, logits)
    a, m = v.accepted_steps, v.accepted_tokens
    assert v.steps.shape == (a + 1, G)
    assert G * a <= m <= G * a + G - 1 and m <= G * gamma
    # every committed token is the target's argmax at its position (hence legal: finite logit)
    assert torch.equal(v.steps, best[: a + 1])
    assert bool(torch.isfinite(logits[: a + 1].gather(-1, v.steps.unsqueeze(-1))).all())
    # acceptance stops exactly at the first disagreement (row-major)
    agree = (draft == best[:gamma]).reshape(-1)
    first_bad = int((~agree).nonzero()[0]) if bool((~agree).any()) else gamma * G
    assert m == first_bad
    assert torch.equal(v.steps[:a], draft[:a])
    if m % G:
        assert torch.equal(v.steps[a, : m % G], draft[a, : m % G])
    if mode == "argmax":
        assert a == gamma and m == gamma * G
        assert torch.equal(v.steps[-1], best[gamma])


# ---------------------------------------------------------------------------------------------
# Engine-level: the caches hold exactly the committed prefix after every step.


@functools.cache
def _models(kind: str):
    if kind == "flat":
        target = tiny_flat(seed=1, min_frames=2)
        head = target.model.get_output_embeddings().weight
        with torch.no_grad():  # let EOS compete with a codebook-0 code, so some runs end early
            lo = target.layout.audio_offset
            like = int(head[lo : lo + target.layout.codebook_size].norm(dim=1).argmax()) + lo
            head[target.layout.eos_id] = head[like] * 1.05
        return target, flat_draft(target)
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, delays=[0, 1, 2], min_frames=2)
    return target, codec_draft(target)


def _kv(session) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the cached keys and values ``[1, H, positions, D]`` (what a row really holds)."""
    cache = session.cache
    if isinstance(cache, KVCache):
        r, n = session.row, cache.lengths[session.row]
        return [(cache.k[i, r: r + 1, :, :n], cache.v[i, r: r + 1, :, :n]) for i in range(cache.k.shape[0])]
    return [(layer.keys, layer.values) for layer in cache.layers]


def _assert_cache_holds(lm, session, prompt: Prompt, history: torch.Tensor) -> None:
    """``session``'s cache equals a fresh prefill of ``history[:session.length]`` (plus the text)."""
    n = session.length
    fresh = lm.start(Prompt(prompt.text, history[: n + 1]))
    assert fresh.length == n
    assert fresh.cache is not session.cache or fresh.row != session.row
    got, want = _kv(session), _kv(fresh)
    if n + prompt.text.numel() == 0:
        assert all(k is None or k.numel() == 0 for k, _ in got)
        return
    assert len(got) == len(want)
    for (k, v), (k0, v0) in zip(got, want):
        assert k.shape == k0.shape and v.shape == v0.shape, (k.shape, k0.shape)
        torch.testing.assert_close(k, k0, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(v, v0, atol=1e-5, rtol=1e-4)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**31 - 1),
    gamma=st.integers(0, 5),
    drafter=st.sampled_from(["ngram", "draft-model"]),
    greedy=st.booleans(),
    kind=st.sampled_from(["flat", "delay"]),
    text=st.lists(st.integers(0, TEXT_VOCAB - 1), min_size=1, max_size=4),
)
def test_caches_hold_exactly_the_committed_prefix(seed, gamma, drafter, greedy, kind, text):
    target, draft_lm = _models(kind)
    layout = target.layout
    prompt = layout.prompt([t + 3 for t in text] if kind == "flat" else text)
    sampling = SamplingConfig(temperature=0) if greedy else SamplingConfig(temperature=1.0, top_k=3)
    d = NGramDrafter() if drafter == "ngram" else ModelDrafter(draft_lm)
    config = DecodeConfig(sampling, gamma=gamma, max_steps=12, seed=seed)
    gen = SpecDecoder(target, d, config).generate(prompt)
    _assert_cache_holds(target, gen.target, prompt, gen.history)
    n_steps = 0
    while not gen.done:
        before = gen.length
        chunk = gen.step()
        n_steps += 1
        assert gen.length - before == chunk.steps.shape[0] >= 1
        assert chunk.steps.shape[0] <= gamma + 1
        assert gen.target.length == gen.length - 1  # pending-step convention
        _assert_cache_holds(target, gen.target, prompt, gen.history)
        if isinstance(d, ModelDrafter):
            session = gen.draft_session.session
            assert session.length <= gen.length - 1
            _assert_cache_holds(draft_lm, session, prompt, gen.history)
        assert n_steps <= config.max_steps
    assert gen.length - gen.n_prompt <= config.max_steps


@pytest.mark.slow
def test_verify_sampling_unit_distribution(chi_square_pvalue):
    """The rule itself on synthetic p and q (one step, G=2, γ=1): the committed first step is
    distributed exactly as p, both codebooks jointly."""
    g = torch.Generator().manual_seed(0)
    V = 4
    p = torch.tensor([[[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]], [[0.25] * 4, [0.5, 0.5, 0.0, 0.0]]])
    q = torch.tensor([[[0.4, 0.3, 0.2, 0.1], [0.1, 0.1, 0.1, 0.7]]])
    n = 20000
    counts: Counter = Counter()
    for _ in range(n):
        draft = torch.multinomial(q[0], 1, generator=g).T  # [1, G]
        verdict = verify_sampling(draft, q, p, g)
        counts[tuple(verdict.steps[0].tolist())] += 1
    exact = {(a, b): float(p[0, 0, a] * p[0, 1, b]) for a in range(V) for b in range(V)}
    assert chi_square_pvalue(counts, exact) > 1e-3


# --- the LOSSY rule (opt-in, never the default) ------------------------------------------------

def test_lossy_top_k_keeps_drafts_the_target_ranks_high_and_replaces_the_first_it_does_not():
    from voicespec.engine.verify import verify_lossy_top_k

    logits = torch.tensor([[[5.0, 4.0, 0.0, -1.0]], [[0.0, 1.0, 9.0, 2.0]], [[3.0, 0.0, 0.0, 0.0]]])  # [γ+1=3, G=1, V=4]
    draft = torch.tensor([[1], [3]])  # ranked 2nd, then 2nd
    v = verify_lossy_top_k(draft, logits, 2, None, greedy=True)
    assert v.accepted_steps == 2 and v.steps.flatten().tolist() == [1, 3, 0]  # both kept, bonus = argmax
    assert verify_greedy(draft, logits).accepted_steps == 0  # the exact rule keeps neither
    v = verify_lossy_top_k(torch.tensor([[1], [0]]), logits, 2, None, greedy=True)
    assert v.accepted_steps == 1 and v.steps.flatten().tolist() == [1, 2]  # 0 ranks 4th: replaced by the argmax
    masked = logits.clone()
    masked[0, 0, 1:] = float("-inf")  # one legal token; k = 3 must not admit illegal ones
    assert verify_lossy_top_k(torch.tensor([[2]]), masked[:2], 3, None, greedy=True).accepted_steps == 0
    g = torch.Generator().manual_seed(0)
    v = verify_lossy_top_k(torch.tensor([[3]]), logits[1:], 1, g, greedy=False)
    assert v.accepted_steps == 0 and v.steps.shape == (1, 1)


def test_lossy_top_1_greedy_is_plain_greedy_and_every_lossy_run_is_labelled(coarse_first_case):
    target, drafter, prompt = coarse_first_case
    plain = SpecDecoder(target).generate(prompt, DecodeConfig(SamplingConfig(temperature=0), gamma=0, max_steps=30))
    plain.run()
    lossy = SpecDecoder(target, drafter).generate(prompt, DecodeConfig(SamplingConfig(temperature=0, lossy_top_k=1),
                                                                       gamma=3, max_steps=30))
    lossy.run()
    assert torch.equal(lossy.generated, plain.generated)  # top-1 tolerance is the argmax rule
    assert plain.stats.acceptance == "exact" and lossy.stats.acceptance == "lossy-top-1"
    loose = SpecDecoder(target, drafter).generate(prompt, DecodeConfig(SamplingConfig(temperature=0, lossy_top_k=4),
                                                                       gamma=3, max_steps=30))
    loose.run()
    assert loose.stats.to_dict()["acceptance"] == "lossy-top-4"
    assert loose.stats.accepted_tokens >= lossy.stats.accepted_tokens


@pytest.fixture
def coarse_first_case():
    target = tiny_codec_lm(seed=4, n_codebooks=3, codebook_size=16, min_frames=10, coarse_first=True)
    return target, ModelDrafter(codec_draft(target)), target.layout.prompt([1, 2, 3])
