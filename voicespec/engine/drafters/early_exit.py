"""Self-speculation by early exit (LayerSkip-style): the target's first layers and its own heads draft.

No weights of its own and no cache of its own: the draft runs the target's first ``n_layers``
layers over the pending step and each drafted step at the positions just past the row's committed
prefix, reading the target's own keys and values for everything committed (those layers' cache
*is* what the draft would have computed) and writing its own there without moving the row's
length, so the verify pass overwrites them and a rejection needs no rollback
(:meth:`~voicespec.lm.llama.LlamaStack.peek`). Without an early-exit loss in the target's recipe
the first layers' state is a poor readout; the bench measures how poor.
"""

from __future__ import annotations

from typing import Any

import torch

from voicespec.engine.drafters.base import Draft, DraftContext, draft_loop
from voicespec.engine.layout import Prompt, TokenLayout


class EarlyExitSession:
    def __init__(self, drafter: EarlyExitDrafter) -> None:
        self.drafter = drafter

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, gamma: int) -> Draft:
        session = ctx.target
        if gamma == 0 or getattr(session, "stack", None) is None:
            return Draft(ctx.history[:0])
        model, stack, start = session.model, session.stack, session.length  # the pending step's cache position
        n = self.drafter.n_layers

        def next_logits(j: int, step: torch.Tensor) -> torch.Tensor:
            pos = start + j
            h = stack.peek(session.embed_at(step[None], pos), session.cache, session.row, session.prefix + pos, n)
            return model.heads(h[0]).view(1, model.n_codebooks, model.head_vocab).float().cpu()

        if session.length != ctx.history.shape[0] - 1:
            raise RuntimeError("early exit needs the target's cache to hold every committed step but the pending one")
        return draft_loop(ctx, gamma, next_logits)

    def rollback(self, keep: int) -> None:
        """Nothing to undo: the draft's keys and values lie past the committed prefix."""

    def close(self) -> None:
        """Nothing held: the cache row is the target's."""


class EarlyExitDrafter:
    """The first ``n_layers`` of ``target`` (a step LM over a plain-torch stack) as its own draft."""

    def __init__(self, target: Any, n_layers: int = 1) -> None:
        total = len(target.model.backbone.layers)
        if not 1 <= n_layers < total:
            raise ValueError(f"early exit needs 1 <= n_layers < {total} (the target's layers), got {n_layers}")
        if target.stack is None:
            raise ValueError("early exit shares the target's position-addressed cache: the target needs static=True")
        self.target, self.n_layers = target, n_layers
        self.name = f"early-exit-{n_layers}"

    @property
    def layout(self) -> TokenLayout:
        return self.target.layout

    def start(self, prompt: Prompt) -> EarlyExitSession:
        return EarlyExitSession(self)
