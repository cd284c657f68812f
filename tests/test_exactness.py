"""Greedy speculative decoding is token-identical to plain decoding (independent oracles)."""

from __future__ import annotations

import pytest
import torch

from helpers import full_logits
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.lm.hf import LayoutMaskProcessor
from voicespec.engine.policy import TokenPolicy
from voicespec.pipeline.tiny import codec_draft, flat_draft, tiny_codec_lm, tiny_flat

GREEDY = SamplingConfig(temperature=0)


def eos_prone(lm, eos_row: int, cb0_tokens: list[int], row_offset: int = 0) -> None:
    """Make the EOS output row a slightly scaled copy of the row of the most frequent codebook-0
    token of an earlier greedy run, so greedy output ends where that token would have come."""
    like = max(set(cb0_tokens), key=cb0_tokens.count) + row_offset
    head = lm.model.get_output_embeddings().weight
    with torch.no_grad():
        head[eos_row] = head[like] * 1.05


def drafters_for(target, draft):
    return {
        "ngram": NGramDrafter(),
        "draft-model": ModelDrafter(draft),
        "independent-model": ModelDrafter(type(target)(*_rebuild(target))),
    }


def _rebuild(target):
    """A draft with the target's layout but unrelated random weights (low acceptance)."""
    if hasattr(target.model, "backbone"):
        c = target.model.config
        other = tiny_codec_lm(seed=99, n_codebooks=c.n_codebooks, codebook_size=c.codebook_size, delays=list(c.delays),
                              min_frames=c.min_frames, n_layers=1, coarse_first=c.coarse_first)
        return (other.model,)
    other = tiny_flat(seed=99, n_layers=1, n_codebooks=target.layout.n_codebooks,
                      codebook_size=target.layout.codebook_size, min_frames=target.layout.min_frames)
    return other.model, target.layout


def hf_greedy(target, prompt, max_new: int) -> list[int]:
    ids = prompt.steps.T
    out = target.model.generate(
        ids, max_new_tokens=max_new, do_sample=False, logits_processor=[LayoutMaskProcessor(target.layout, ids.shape[1])],
        eos_token_id=target.layout.eos_id, pad_token_id=target.layout.pad_id,
    )
    return out[0, ids.shape[1] :].tolist()


FLAT_CASES = [  # (seed, prompt text ids, make it end with EOS)
    (1, [3, 4, 5, 6], False),
    (2, [10, 11], True),
    (3, [7, 30, 8, 9, 12, 13, 14], True),
]


@pytest.mark.parametrize("seed,text,ends", FLAT_CASES)
def test_flat_greedy_matches_transformers_generate(seed, text, ends):
    target = tiny_flat(seed=seed, min_frames=4)
    layout = target.layout
    prompt = layout.prompt(text)
    max_new = 48
    reference = hf_greedy(target, prompt, max_new)
    if ends:
        eos_prone(target, layout.eos_id, reference[2 * layout.min_frames :: 2])
        reference = hf_greedy(target, prompt, max_new)
    if ends:
        assert reference[-1] == layout.eos_id, "test setup: this case should end with EOS"
    for name, drafter in drafters_for(target, flat_draft(target)).items():
        for gamma in (1, 2, 4, 7):
            gen = SpecDecoder(target, drafter, DecodeConfig(GREEDY, gamma=gamma, max_steps=max_new)).generate(prompt)
            frames = gen.run()
            assert gen.generated[:, 0].tolist() == reference, f"{name} γ={gamma}"
            assert frames.shape[1] == gen.stats.frames
            assert gen.stats.finish_reason == ("eos" if ends else "length")


def test_flat_speculation_actually_accepts_drafts():
    """Guard against a vacuous exactness test: the drafters above must get tokens accepted."""
    target = tiny_flat(seed=1, min_frames=4)
    prompt = target.layout.prompt([3, 4, 5, 6])
    for drafter in (NGramDrafter(), ModelDrafter(flat_draft(target))):
        gen = SpecDecoder(target, drafter, DecodeConfig(GREEDY, gamma=4, max_steps=48)).generate(prompt)
        gen.run()
        assert gen.stats.accepted > 0 and gen.stats.mean_accepted_length > 1.2, drafter.name


def naive_greedy(lm, prompt, max_steps: int) -> torch.Tensor:
    """Plain greedy decoding with no KV cache: every step recomputes the whole sequence."""
    layout, policy = lm.layout, TokenPolicy(lm.layout, GREEDY)
    state, steps = layout.initial_state(prompt), prompt.steps[:0]
    while len(steps) < max_steps and not layout.is_done(state):
        raw = full_logits(lm, prompt, steps).unsqueeze(0)
        token = policy.choose(policy.warp(raw, state, steps[:0], steps), None)[0]
        steps = torch.cat([steps, token.unsqueeze(0)])
        state = layout.advance(state, token)
    return steps


@pytest.mark.parametrize("delays", [[0, 1, 2], [0, 0, 0], [0, 2, 3]])
def test_delay_greedy_speculation_equals_plain(delays):
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, delays=delays, min_frames=6)
    layout = target.layout
    prompt = layout.prompt([1, 2, 3, 4])
    max_steps = 40
    before = SpecDecoder(target, None, DecodeConfig(GREEDY, gamma=0, max_steps=max_steps)).generate(prompt)
    before.run()
    eos_prone(target, layout.eos_id, before.generated[layout.min_frames :, 0].tolist())  # codebook 0's rows come first
    plain = SpecDecoder(target, None, DecodeConfig(GREEDY, gamma=0, max_steps=max_steps)).generate(prompt)
    plain_frames = plain.run()
    assert plain.stats.finish_reason == "eos"
    assert torch.equal(plain.generated, naive_greedy(target, prompt, max_steps))
    for name, drafter in drafters_for(target, codec_draft(target)).items():
        for gamma in (1, 3, 6):
            gen = SpecDecoder(target, drafter, DecodeConfig(GREEDY, gamma=gamma, max_steps=max_steps)).generate(prompt)
            frames = gen.run()
            assert torch.equal(gen.generated, plain.generated), f"{name} γ={gamma}"
            assert torch.equal(frames, plain_frames), f"{name} γ={gamma}"


def test_delay_frames_assemble_in_order_exactly_once():
    target = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, min_frames=6)
    gen = SpecDecoder(target, NGramDrafter(), DecodeConfig(GREEDY, gamma=3, max_steps=30)).generate(target.layout.prompt([1]))
    frames = gen.run()
    rebuilt = target.layout.steps_for_frames(frames, with_eos=False)
    n = rebuilt.shape[0]
    assert torch.equal(gen.generated[:n][rebuilt != target.layout.pad_id], rebuilt[rebuilt != target.layout.pad_id])
    assert frames.shape[1] == gen.stats.frames == 30 - 2


def test_layout_mask_processor_remembers_rows_and_survives_rollback():
    """The processor advances over new ids only; a shorter or diverging row (assisted generation
    rejecting drafted ids) must give the mask a fresh walk gives."""
    from voicespec.engine.layout import FlatLayout

    layout = FlatLayout(n_codebooks=2, codebook_size=3, audio_offset=4, vocab_size=11, start_id=0, eos_id=1, pad_id=2)
    prompt = torch.tensor([[0, 3]])
    kept = LayoutMaskProcessor(layout, prompt_len=2)
    scores = torch.zeros(1, layout.vocab_size)
    gen = torch.Generator().manual_seed(0)
    audio = torch.randint(4, 10, (1, 9), generator=gen)
    for n in [1, 2, 3, 5, 4, 2, 6, 9, 3]:  # grows, rolls back, grows again
        row = torch.cat([prompt, audio[:, :n]], dim=1)
        fresh = LayoutMaskProcessor(layout, prompt_len=2)
        assert torch.equal(kept(row, scores.clone()), fresh(row, scores.clone()))
    other = torch.cat([prompt, audio[:, :2], torch.tensor([[1]])], dim=1)  # diverges at the same length
    assert torch.equal(kept(other, scores.clone()), LayoutMaskProcessor(layout, 2)(other, scores.clone()))
