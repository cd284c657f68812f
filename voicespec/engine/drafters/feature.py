"""Feature-level drafting (EAGLE-style): predict the target's next hidden state, read it out with the target's heads.

The draft holds no cache and no vocabulary-sized weights of its own: from the hidden state ``f``
that predicted the pending step (the verify pass computed it anyway) and the target's embedding
of that step, one small block (:class:`~voicespec.lm.draft_heads.DraftHeads`) predicts the next
hidden state; the target's heads turn it into logits; the drafted step's embedding and the
predicted state feed the next block call. Rejection needs no rollback: the next proposal starts
again from the target's own state. A drafted step costs one block, one head and the policy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from voicespec.engine.drafters.base import Draft, DraftContext, draft_loop
from voicespec.engine.layout import Prompt, TokenLayout

if TYPE_CHECKING:  # the engine does not import model code; it is handed the models
    from voicespec.lm.codec_lm import CodecStepLM
    from voicespec.lm.draft_heads import DraftHeads


class HeadsSession:
    """Per request: nothing to keep between proposals (the target's session carries the state)."""

    def __init__(self, drafter: FeatureDrafter) -> None:
        self.drafter = drafter

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, gamma: int) -> Draft:
        gamma = min(gamma, self.drafter.max_gamma)
        if ctx.features is None or gamma == 0:
            return Draft(ctx.history[:0])
        return draft_loop(ctx, gamma, self.drafter.next_logits_for(ctx, gamma))

    def rollback(self, keep: int) -> None:
        """Nothing to undo: proposals start from the target's state."""

    def close(self) -> None:
        """Nothing held."""


class FeatureDrafter:
    """``heads`` (kind ``feature``) over ``target``'s hidden states, embeddings and heads."""

    name = "feature"
    max_gamma = 1 << 30  # recurrent: any length

    def __init__(self, target: CodecStepLM, heads: DraftHeads, name: str | None = None) -> None:
        if heads.config.hidden_size != target.model.config.hidden_size:
            raise ValueError(f"draft heads of width {heads.config.hidden_size} do not fit a target of width "
                             f"{target.model.config.hidden_size}")
        if not target.model.config.coarse_first:
            raise ValueError("draft heads read one token per step: they need a coarse-first target")
        self.target, self.heads = target, heads.eval()
        self.name = name or self.name

    @property
    def layout(self) -> TokenLayout:
        return self.target.layout

    def start(self, prompt: Prompt) -> HeadsSession:
        return HeadsSession(self)

    def readout(self, f: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, 1, V]`` (host, float32) of predicted hidden states ``f [N, D]``."""
        model = self.target.model
        return model.heads(f).view(f.shape[0], 1, model.head_vocab).float().cpu()

    def next_logits_for(self, ctx: DraftContext, gamma: int):
        """The recurrent draft: position ``j`` reads the state predicted at ``j - 1`` and the step drafted there."""
        session, start = ctx.target, ctx.history.shape[0] - 1  # the pending step's position
        state = {"f": ctx.features[None]}

        def next_logits(j: int, step: torch.Tensor) -> torch.Tensor:
            e = session.embed_at(step[None], start + j)[0]  # [1, D]
            state["f"] = self.heads(state["f"], e)[0]
            return self.readout(state["f"])

        return next_logits
