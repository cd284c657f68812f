"""Step LMs: a causal LM seen as ``steps [T, G] -> logits [T, G, V]`` over an explicit KV cache.

Cache convention (as in gpt-fast): a session's cache holds every committed step except the last,
which is *pending*: the next forward feeds it together with the drafts, so one pass yields the
target's distribution at every draft position plus the bonus position. Rolling back a rejected
draft is ``truncate(n)`` — a crop of the transformers ``DynamicCache``.
"""

from __future__ import annotations

from typing import Protocol

import torch
from transformers import DynamicCache, PreTrainedModel

from voicespec.engine.layout import Prompt, TokenLayout


class StepLM(Protocol):
    """Anything the engine can decode from: a layout plus sessions with a KV cache."""

    layout: TokenLayout

    def start(self, prompt: Prompt) -> "LMSession": ...


class LMSession:
    """One request's KV cache over a model. Subclasses define how steps become model inputs."""

    def __init__(self, model: PreTrainedModel, prefix: int = 0) -> None:
        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.prefix = prefix  # cached positions that are not steps (a text prefix)
        self.length = 0  # cached steps

    def _logits(self, steps: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.inference_mode()
    def forward(self, steps: torch.Tensor) -> torch.Tensor:
        """Append ``steps`` (``[T, G]``) to the cache; return their logits ``[T, G, V]``."""
        logits = self._logits(steps)
        self.length += steps.shape[0]
        return logits

    def truncate(self, length: int) -> None:
        """Roll the cache back to its first ``length`` steps."""
        if length < self.length:
            self.cache.crop(length - self.length)
            self.length = length
