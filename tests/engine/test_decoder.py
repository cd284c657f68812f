"""Greedy speculative decoding is token-identical to plain decoding (independent oracles); bad
prompts and mismatched drafters fail early with an error that names the problem."""

from __future__ import annotations

import pytest
import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.engine.layout import Prompt
from voicespec.lm.hf import LayoutMaskProcessor
from voicespec.pipeline.tiny import TEXT_VOCAB, codec_draft, flat_draft, tiny_codec_lm, tiny_flat

GREEDY = SamplingConfig(temperature=0)


def eos_prone(lm, eos_row: int, cb0_tokens: list[int], row_offset: int = 0) -> None:
    """Make the EOS output row a slightly scaled copy of the row of the most frequent codebook-0
    token of an earlier greedy run, so greedy output ends where that token would have come."""
    like = max(set(cb0_tokens), key=cb0_tokens.count) + row_offset
    head = lm.model.get_output_embeddings().weight
    with torch.no_grad():
        head[eos_row] = head[like] * 1.05


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
def test_flat_greedy_matches_transformers_generate(seed, text, ends, drafters_for):
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


@pytest.mark.parametrize("delays", [[0, 1, 2], [0, 0, 0], [0, 2, 3]])
def test_delay_greedy_speculation_equals_plain(delays, drafters_for, naive_greedy):
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


# --- bad input -----------------------------------------------------------------------------------


def test_prompt_with_wrong_group_count_flat(flat_lm):
    prompt = Prompt(torch.empty(0, dtype=torch.long), torch.zeros(3, 2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"prompt steps must be \[P >= 1, 1\], got \(3, 2\)"):
        SpecDecoder(flat_lm).generate(prompt)


def test_prompt_with_wrong_group_count_delay(delay_lm):
    prompt = Prompt(torch.tensor([1, 2]), torch.full((1, 2), delay_lm.layout.bos_id))
    with pytest.raises(ValueError, match=r"prompt steps must be \[P >= 1, 3\], got \(1, 2\)"):
        SpecDecoder(delay_lm).generate(prompt)


def test_prompt_without_steps(flat_lm):
    prompt = Prompt(torch.empty(0, dtype=torch.long), torch.zeros(0, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="prompt steps must be"):
        SpecDecoder(flat_lm).generate(prompt)


def test_flat_layout_rejects_a_text_prefix(flat_lm):
    prompt = Prompt(torch.tensor([3, 4]), torch.zeros(1, 1, dtype=torch.long))
    with pytest.raises(ValueError, match="flat layouts take their text ids as prompt steps"):
        SpecDecoder(flat_lm).generate(prompt)


@pytest.mark.parametrize("bad", [[TEXT_VOCAB], [1, 2, 99], [-1]])
def test_codec_lm_text_ids_out_of_range(bad, delay_lm):
    with pytest.raises(ValueError, match=rf"text ids must lie in \[0, {TEXT_VOCAB}\)"):
        SpecDecoder(delay_lm).generate(delay_lm.layout.prompt(bad))


@pytest.mark.parametrize("bad", [[10_000], [-1]])
def test_flat_prompt_ids_out_of_vocabulary(bad, flat_lm):
    with pytest.raises(ValueError, match="vocab"):
        SpecDecoder(flat_lm).generate(flat_lm.layout.prompt(bad))


@pytest.mark.parametrize(
    "target,draft",
    [
        (lambda: tiny_flat(codebook_size=8), lambda: tiny_flat(codebook_size=16, n_layers=1)),
        (lambda: tiny_flat(n_codebooks=2), lambda: tiny_flat(n_codebooks=3, n_layers=1)),
        (lambda: tiny_flat(), lambda: tiny_codec_lm(n_layers=1)),
        (lambda: tiny_codec_lm(), lambda: tiny_flat(n_layers=1)),
        (lambda: tiny_codec_lm(delays=[0, 1, 2]), lambda: tiny_codec_lm(delays=[0, 0, 0], n_layers=1)),
        (lambda: tiny_codec_lm(codebook_size=8), lambda: tiny_codec_lm(codebook_size=16, n_layers=1)),
    ],
    ids=["flat-C8-vs-C16", "flat-K2-vs-K3", "flat-vs-delay", "delay-vs-flat", "delays-differ", "delay-C8-vs-C16"],
)
def test_mismatched_draft_and_target_vocabularies(target, draft):
    with pytest.raises(ValueError, match="does not match the target's vocabulary/layout"):
        SpecDecoder(target(), ModelDrafter(draft()))
