"""Step LMs: a causal LM seen as ``steps [T, G] -> logits [T, G, V]`` over an explicit KV cache.

Cache convention (as in gpt-fast): a session's cache holds every committed step except the last,
which is *pending*: the next forward feeds it together with the drafts, so one pass yields the
target's distribution at every draft position plus the bonus position. Rolling back a rejected
draft is ``truncate(n)``: a row length moved back in a position-addressed
:class:`~voicespec.engine.kv_cache.KVCache`, or a crop of a transformers ``DynamicCache``.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from transformers import DynamicCache, PreTrainedModel

from voicespec.engine.kv_cache import KVCache
from voicespec.engine.layout import Prompt, TokenLayout


class StepLM(Protocol):
    """Anything the engine can decode from: a layout plus sessions with a KV cache."""

    layout: TokenLayout

    def start(self, prompt: Prompt) -> "LMSession": ...


class LMSession:
    """One request's KV cache over a model. Subclasses define how steps become model inputs.

    ``stack``: a plain-torch forward over a position-addressed cache (``new_cache()`` and
    ``forward(embeds, cache, rows)``, e.g. :class:`voicespec.lm.llama.LlamaStack`); the session
    owns row 0 of its cache and rolls back by moving that row's length. Without one, the model's
    own ``transformers`` forward over a ``DynamicCache`` (any architecture)."""

    def __init__(self, model: PreTrainedModel, prefix: int = 0, stack: Any = None) -> None:
        self.model = model
        self.stack = stack
        self.cache: KVCache | DynamicCache = stack.new_cache() if stack is not None else DynamicCache(config=model.config)
        self.prefix = prefix  # cached positions that are not steps (a text prefix)
        self.length = 0  # cached steps

    def append(self, embeds: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[1, T, D]`` of ``embeds [1, T, D]`` appended to this session's row."""
        return self.stack.forward(embeds, self.cache, [0])

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
            if isinstance(self.cache, KVCache):
                self.cache.truncate(0, self.prefix + length)
            else:
                self.cache.crop(length - self.length)
            self.length = length
