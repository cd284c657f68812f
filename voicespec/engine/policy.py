"""The token policy: legality masks plus warpers, applied identically by the target and drafters."""

from __future__ import annotations

import torch

from voicespec.engine.layout import LayoutState, TokenLayout, masks_along
from voicespec.engine.config import SamplingConfig
from voicespec.engine.sampling import recent_tokens, sample, warp


class TokenPolicy:
    """Turns raw logits at a block of positions into the distributions plain decoding would use.

    Position ``i`` of a block is conditioned on the committed steps followed by ``block[:i]``; its
    mask and repetition-penalty context are computed from exactly that prefix.
    """

    def __init__(self, layout: TokenLayout, sampling: SamplingConfig) -> None:
        self.layout = layout
        self.sampling = sampling

    def warp(
        self, raw: torch.Tensor, state: LayoutState, block: torch.Tensor, generated: torch.Tensor
    ) -> torch.Tensor:
        """``raw``: ``[T+1, G, V]`` logits after each prefix of ``block`` (``[T, G]``)."""
        masks = masks_along(self.layout, state, block)
        recent = None
        if self.sampling.uses_history:
            recent = recent_tokens(generated, block, self.sampling.repetition_window)
        return warp(raw, masks, self.sampling, recent)

    def probs(self, warped: torch.Tensor) -> torch.Tensor:
        return warped.softmax(-1)

    def choose(self, warped: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """The next tokens (``[..., G]``): argmax when greedy, else a sample."""
        if self.sampling.greedy:
            return warped.argmax(-1)
        return sample(self.probs(warped), generator)
