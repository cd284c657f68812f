"""The Hugging Face causal-LM adapter: its layout must fit the model's vocabulary, and the
layout mask processor used with ``generate`` follows rollbacks exactly."""

from __future__ import annotations

import pytest
import torch

from voicespec.engine.layout import FlatLayout
from voicespec.lm.hf import HFCausalLM, LayoutMaskProcessor
from voicespec.pipeline.tiny import tiny_flat, tiny_flat_layout


def test_layout_vocab_must_match_the_model():
    other = tiny_flat_layout(codebook_size=16)
    with pytest.raises(ValueError, match=rf"layout vocab_size {other.vocab_size} != model vocabulary"):
        HFCausalLM(tiny_flat(seed=0).model, other)


def test_layout_mask_processor_remembers_rows_and_survives_rollback():
    """The processor advances over new ids only; a shorter or diverging row (assisted generation
    rejecting drafted ids) must give the mask a fresh walk gives."""
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
