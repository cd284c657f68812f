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

With ``inference_weights="int8"`` (the shipped feature drafter) drafting reads int8 copies of the
block and of the target's heads (:mod:`voicespec.lm.int8`); training and the saved weights stay float.

A :class:`~voicespec.weights.FolderModule`: the folder is ``config.json`` + ``model.safetensors`` like every model we ship.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import nn
from torch.nn import functional as F

from voicespec.folders import FolderConfig
from voicespec.lm.int8 import Int8Linear
from voicespec.weights import FolderModule

KINDS = ("feature", "medusa")
WEIGHTS = ("float32", "int8")  # how a feature drafter runs its block and readout (see voicespec.lm.int8)


@dataclass
class DraftHeadsConfig(FolderConfig):
    TYPE: ClassVar[str] = "voicespec_draft_heads"
    WHAT: ClassVar[str] = "voicespec draft heads"

    kind: str = "feature"
    hidden_size: int = 256
    width: int = 1024
    n_heads: int = 1
    distill_temperature: float = 1.0  # the temperature it was distilled at (provenance)
    inference_weights: str = "float32"  # int8: the drafter reads quarter-size copies (training is float)
    # static draft trees fitted to this drafter's acceptance on its target (text forms, e.g.
    # "3/2,1,0/2,1,1"; `voicespec bench --fit-tree`): the adaptive controller's candidates, checked
    # where a drafter is built (voicespec.engine.drafters.feature)
    draft_trees: list[str] | None = None
    voicespec_info: dict[str, Any] = field(default_factory=dict)  # provenance: recipe, target, metrics

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.inference_weights not in WEIGHTS:
            raise ValueError(f"inference_weights must be one of {WEIGHTS}, got {self.inference_weights!r}")
        if self.kind == "feature" and self.n_heads != 1:
            raise ValueError("a feature drafter has one block (it is applied recurrently)")
        self.draft_trees = self.draft_trees or None


class DraftHeads(FolderModule):
    config_class = DraftHeadsConfig

    def __init__(self, config: DraftHeadsConfig) -> None:
        super().__init__()
        self.config = config
        H, D, W = config.n_heads, config.hidden_size, config.width
        self.norm_f = nn.RMSNorm(D)
        self.norm_e = nn.RMSNorm(D)
        self.w1 = nn.Parameter(torch.randn(H, 2 * D, W) * (2 * D) ** -0.5)
        self.b1 = nn.Parameter(torch.zeros(H, 1, W))
        self.w2 = nn.Parameter(torch.zeros(H, W, D))  # zero: every head starts as the identity, f̂ = f
        self.b2 = nn.Parameter(torch.zeros(H, 1, D))

    def forward(self, f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """``f, e [N, D]`` -> predicted features ``[H, N, D]`` (one row per head)."""
        x = self.inputs(f, e)
        if self.w1.shape[0] == 1:  # one head (the feature drafter, per drafted step): no batch of heads to expand into
            return (f + torch.addmm(self.b2[0], F.silu(torch.addmm(self.b1[0], x, self.w1[0])), self.w2[0]))[None]
        return f + torch.baddbmm(self.b2, F.silu(torch.baddbmm(self.b1, x.expand(self.w1.shape[0], *x.shape), self.w1)), self.w2)

    def inputs(self, f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """What every head reads: ``[norm(f); norm(e)]``, ``[N, 2D]``."""
        return torch.cat([self.norm_f(f), self.norm_e(e)], -1)

    @property
    def int8(self) -> bool:
        """Draft from int8 copies: asked for, and on a CPU, where a draft step is bound by reading its weights."""
        return self.config.inference_weights == "int8" and self.w1.device.type == "cpu"

    def block(self) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
        """The one block as a function ``(f, e [N, D]) -> [N, D]`` for drafting: this module, or
        with ``inference_weights="int8"`` its int8 twin (:class:`Int8Block`)."""
        if self.config.kind != "feature":
            raise ValueError("only a feature drafter's single block runs step by step")
        if self.int8:
            return Int8Block(self)
        return lambda f, e: self(f, e)[0]

    def readout(self, weight: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
        """The target's heads ``weight [V, D]`` as the drafter reads them: ``f [N, D] -> [N, V]``,
        from an int8 copy with ``inference_weights="int8"`` (the target itself stays float)."""
        if self.int8:
            return Int8Linear(weight)
        return lambda f: F.linear(f, weight)


class Int8Block:
    """:class:`DraftHeads`' feature block with int8 copies of ``W1`` and ``W2``. The two norms'
    gains are folded into ``W1``'s columns and both inputs are normalised by one call: two
    ``nn.RMSNorm`` calls and a concatenation cost ~50 µs on the 2-core CPU, a fifth of a drafted step."""

    def __init__(self, heads: DraftHeads) -> None:
        gains = torch.cat([heads.norm_f.weight, heads.norm_e.weight]).detach()  # [2D]
        self.eps = heads.norm_f.eps
        self.w1 = Int8Linear(heads.w1[0].T * gains, heads.b1[0])
        self.w2 = Int8Linear(heads.w2[0].T, heads.b2[0])

    def __call__(self, f: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """``f, e [N, D]`` -> ``[N, D]``."""
        x = torch.stack([f, e], 1)  # [N, 2, D]
        x = F.rms_norm(x, x.shape[-1:], eps=self.eps).flatten(1)  # [N, 2D]: [norm(f); norm(e)] without gains
        return f + self.w2(F.silu(self.w1(x)))


