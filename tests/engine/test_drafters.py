"""The drafters on their own: the n-gram drafter's arguments, and that it drafts (and changes no
token) on every layout."""

from __future__ import annotations

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import NGramDrafter


def test_ngram_bad_orders():
    with pytest.raises(ValueError, match="need 1 <= min_n <= max_n"):
        NGramDrafter(max_n=2, min_n=3)
    with pytest.raises(ValueError, match="need 1 <= min_n <= max_n"):
        NGramDrafter(max_n=2, min_n=0)


@pytest.mark.parametrize("lm", ["flat_lm", "delay_lm"])
def test_ngram_drafter_works_with_any_layout(lm, request):
    """It needs nothing from a layout but the committed steps: on both layouts it proposes
    drafts, some are accepted, and greedy output is the plain decoder's."""
    target = request.getfixturevalue(lm)
    prompt = target.layout.prompt([1, 2, 3, 1, 2, 3])
    greedy = SamplingConfig(temperature=0)
    plain = SpecDecoder(target, None, DecodeConfig(greedy, gamma=0, max_steps=40)).generate(prompt)
    plain.run()
    spec = SpecDecoder(target, NGramDrafter(), DecodeConfig(greedy, gamma=3, max_steps=40)).generate(prompt)
    spec.run()
    assert torch.equal(spec.generated, plain.generated)
    assert spec.stats.drafted > 0 and spec.stats.accepted > 0


# --- drafters built on the target: feature heads, Medusa heads, early exit -----------------------

def _target_drafters(target):
    from voicespec.engine.drafters import EarlyExitDrafter, FeatureDrafter, MedusaDrafter
    from voicespec.pipeline.tiny import tiny_draft_heads

    return {"feature": FeatureDrafter(target, tiny_draft_heads(target)),
            "medusa": MedusaDrafter(target, tiny_draft_heads(target, "medusa", n_heads=3, seed=1)),
            "early-exit": EarlyExitDrafter(target, 1)}


@pytest.fixture(scope="module")
def coarse_lm():
    from voicespec.pipeline.tiny import tiny_codec_lm

    return tiny_codec_lm(seed=3, n_codebooks=3, codebook_size=16, min_frames=8, coarse_first=True, track_positions=4)


def _prompt(target):
    track = torch.tensor([[1 + i % 5, 1 + (i + 1) % 5, i % 4, 3 - i % 4] for i in range(30)])
    return target.layout.prompt([1, 2, 3, 4, 5], track=track)


@pytest.mark.parametrize("name", ["feature", "medusa", "early-exit"])
@pytest.mark.parametrize("sampling", [SamplingConfig(temperature=0), SamplingConfig(temperature=0.8, top_k=6)],
                         ids=["greedy", "sampling"])
def test_after_every_step_the_targets_cache_holds_exactly_the_committed_prefix(coarse_lm, name, sampling):
    """Invariant 2: the row's length is the committed steps but the pending one, and its keys and
    values equal a fresh prefill of exactly those steps — the early-exit draft writes into the
    target's own row, past the prefix, and must leave no trace; the heads keep no state at all."""
    target, prompt = coarse_lm, _prompt(coarse_lm)
    gen = SpecDecoder(target, _target_drafters(target)[name], DecodeConfig(sampling, gamma=3, max_steps=25, seed=1)).generate(prompt)
    drafted = 0
    while not gen.done:
        gen.step()
        drafted += gen.stats.gammas[-1]
        session = gen.target
        assert session.length == gen.history.shape[0] - 1
        fresh = target.start(prompt)
        fresh.forward(gen.history[fresh.length: -1])  # everything committed but the pending step, in one pass
        n = session.prefix + session.length
        assert session.cache.lengths[session.row] == n
        for kv in ("k", "v"):
            mine = getattr(session.cache, kv)[:, session.row, :, :n]
            theirs = getattr(fresh.cache, kv)[:, fresh.row, :, :n]
            assert torch.allclose(mine, theirs, atol=1e-5), f"{name}: {kv} differs from the committed prefix's"
        fresh.close()
    assert drafted > 0 and gen.stats.accepted > 0, f"{name} never drafted or was never accepted"
    gen.close()


def test_target_drafters_refuse_what_they_cannot_read(coarse_lm, delay_lm):
    from voicespec.engine.drafters import EarlyExitDrafter, FeatureDrafter
    from voicespec.lm.codec_lm import CodecStepLM
    from voicespec.pipeline.tiny import tiny_codec_lm, tiny_draft_heads

    heads = tiny_draft_heads(coarse_lm)
    with pytest.raises(ValueError, match="coarse-first"):
        FeatureDrafter(delay_lm, heads)
    wide = tiny_codec_lm(seed=1, hidden=32, coarse_first=True)
    with pytest.raises(ValueError, match="width 64 do not fit a target of width 32"):
        FeatureDrafter(wide, heads)
    with pytest.raises(ValueError, match="1 <= n_layers < 2"):
        EarlyExitDrafter(coarse_lm, 2)
    with pytest.raises(ValueError, match="static=True"):
        EarlyExitDrafter(CodecStepLM(coarse_lm.model, static=False), 1)
