"""Bridges to ``transformers`` generation: the layout's legality mask as a ``LogitsProcessor``.

With it, ``model.generate()`` decodes under exactly the masks our engine applies, which makes
``generate()`` usable as an independent oracle (tests) and as the assisted-generation peer (bench).
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor

from .layout import FlatLayout


class LayoutMaskProcessor(LogitsProcessor):
    """Masks illegal ids for a flat layout; ``prompt_len`` is the length of the prompt ids."""

    def __init__(self, layout: FlatLayout, prompt_len: int) -> None:
        self.layout = layout
        self.prompt_len = prompt_len

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        masks = []
        for row in input_ids[:, self.prompt_len :]:
            state = self.layout.initial_state()
            for token in row:
                state = self.layout.advance(state, token.view(1))
            masks.append(self.layout.mask(state)[0])
        return scores.masked_fill(~torch.stack(masks), float("-inf"))
