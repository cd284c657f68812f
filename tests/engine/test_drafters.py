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
