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

from voicespec.engine.layout import FlatLayout, Prompt, TokenLayout


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


class HFSession(LMSession):
    def _logits(self, steps: torch.Tensor) -> torch.Tensor:
        out = self.model(input_ids=steps.T, cache=self.cache, use_cache=True)
        return out.logits[0].unsqueeze(1)


class HFCausalLM:
    """Any ``transformers`` causal LM decoded in the flat layout (one token per step)."""

    def __init__(self, model: PreTrainedModel, layout: FlatLayout) -> None:
        vocab = model.get_output_embeddings().weight.shape[0]
        if layout.vocab_size != vocab:
            raise ValueError(f"layout vocab_size {layout.vocab_size} != model vocabulary {vocab}")
        self.model = model.eval()
        self.layout = layout

    def start(self, prompt: Prompt) -> HFSession:
        if prompt.text.numel():
            raise ValueError("flat layouts take their text ids as prompt steps, not as a prefix")
        session = HFSession(self.model)
        if prompt.steps.shape[0] > 1:
            session.forward(prompt.steps[:-1])
        return session
