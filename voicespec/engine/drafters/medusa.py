"""Medusa/MTP heads: every draft position from the target's state in one call.

Head ``k`` of a :class:`~voicespec.lm.draft_heads.DraftHeads` (kind ``medusa``) predicts the
hidden state ``k`` steps past the pending one from the same input — the hidden state that
predicted the pending step and the pending step's embedding (MTP-style: the pending step is
already committed, so it is free to read) — and the target's heads read each one out. The
drafted steps are then drawn one by one with the target's policy (masks depend on the steps
before), but the model runs once per proposal, whatever γ.
"""

from __future__ import annotations

from voicespec.engine.drafters.base import DraftContext
from voicespec.engine.drafters.feature import FeatureDrafter


class MedusaDrafter(FeatureDrafter):
    """``heads`` (kind ``medusa``, ``n_heads`` = the longest draft) over ``target``."""

    name = "medusa"
    drafts_trees = False  # its heads are not conditioned on the drafts before them: chains only here

    @property
    def max_gamma(self) -> int:
        return self.heads.config.n_heads

    def next_logits_for(self, ctx: DraftContext, gamma: int):
        session, start = ctx.target, ctx.history.shape[0] - 1
        e = session.embed_at(ctx.history[-1:], start)[0]  # [1, D]
        logits = self.readout(self.heads(ctx.features[None], e)[: gamma, 0])  # [H', 1, V]
        return lambda j, step: logits[j: j + 1]
