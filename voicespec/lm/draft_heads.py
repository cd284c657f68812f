"""Draft heads over a target's final hidden state: the feature-level (EAGLE-style) drafter and Medusa/MTP heads.

Both are the same block: ``f̂ = f + W2·silu(W1·[norm(f); norm(e)])``, where ``f [D]`` is the target's
final (normed) hidden state that predicted the pending step and ``e [D]`` the target's own input
embedding of a step (code plus frame-aligned track row). The target's heads read ``f̂``, so the
draft owns no vocabulary-sized weights and shares the target's embedding tables.

- ``kind="feature"``: one block, applied recurrently — ``f̂_{t+1} = block(f_t, e_{t+1})``, then
  ``block(f̂_{t+1}, e(d_{t+2}))`` for the token it drafted, and so on: the drafted tokens feed back,
  so in sampling mode each proposal is conditioned on the ones before it, like the target.
- ``kind="medusa"``: ``n_heads`` blocks in parallel on the same ``(f_t, e_{t+1})``; head ``k``
  predicts step ``t+k`` without seeing drafts ``1..k-1`` (Medusa; with the pending step's
  embedding, as DeepSeek's MTP modules read the next token). One call drafts every position.

A ``PreTrainedModel``, so the folder is ``config.json`` + ``model.safetensors`` like every model we ship.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AutoConfig, AutoModel, PretrainedConfig, PreTrainedModel

KINDS = ("feature", "medusa")


class DraftHeadsConfig(PretrainedConfig):
    model_type = "voicespec_draft_heads"

    def __init__(self, kind: str = "feature", hidden_size: int = 256, width: int = 1024, n_heads: int = 1,
                 distill_temperature: float = 1.0, **kwargs: Any) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
        if kind == "feature" and n_heads != 1:
            raise ValueError("a feature drafter has one block (it is applied recurrently)")
        self.kind = kind
        self.hidden_size = hidden_size
        self.width = width
        self.n_heads = n_heads
        self.distill_temperature = distill_temperature  # the temperature it was distilled at (provenance)
        super().__init__(**kwargs)


class DraftHeads(PreTrainedModel):
    config_class = DraftHeadsConfig
    base_model_prefix = "draft_heads"

    def __init__(self, config: DraftHeadsConfig) -> None:
        super().__init__(config)
        H, D, W = config.n_heads, config.hidden_size, config.width
        self.norm_f = nn.RMSNorm(D)
        self.norm_e = nn.RMSNorm(D)
        self.w1 = nn.Parameter(torch.randn(H, 2 * D, W) * (2 * D) ** -0.5)
        self.b1 = nn.Parameter(torch.zeros(H, 1, W))
        self.w2 = nn.Parameter(torch.zeros(H, W, D))  # zero: every head starts as the identity, f̂ = f
        self.b2 = nn.Parameter(torch.zeros(H, 1, D))
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        """Weights are set in ``__init__`` (the identity start); nothing to re-initialise."""

    def forward(self, f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """``f, e [N, D]`` -> predicted features ``[H, N, D]`` (one row per head)."""
        x = torch.cat([self.norm_f(f), self.norm_e(e)], -1)  # [N, 2D]
        return f + torch.baddbmm(self.b2, F.silu(torch.baddbmm(self.b1, x.expand(self.w1.shape[0], *x.shape), self.w1)), self.w2)


AutoConfig.register(DraftHeadsConfig.model_type, DraftHeadsConfig)
AutoModel.register(DraftHeadsConfig, DraftHeads)
