"""A separate, smaller draft LM with the target's layout and vocabulary and its own KV cache."""

from __future__ import annotations

import torch

from voicespec.engine.layout import Prompt, TokenLayout
from voicespec.engine.step_lm import LMSession, StepLM
from voicespec.engine.drafters.base import Draft, DraftContext, draft_loop


class ModelDraftSession:
    def __init__(self, session: LMSession) -> None:
        self.session = session

    @torch.inference_mode()
    def propose(self, ctx: DraftContext, gamma: int) -> Draft:
        """Draft autoregressively with the same policy (masks, warpers) the target uses.

        The first forward also feeds whatever committed steps the cache lacks (the pending step,
        plus the last accepted draft when a whole block was accepted), so catch-up costs no
        extra pass.
        """
        catch_up = ctx.history[self.session.length: -1]

        def next_logits(j: int, step: torch.Tensor) -> torch.Tensor:
            feed = torch.cat([catch_up, step[None]]) if j == 0 else step[None]
            return self.session.forward(feed)[-1:]

        return draft_loop(ctx, gamma, next_logits)

    def rollback(self, keep: int) -> None:
        self.session.truncate(keep)

    def close(self) -> None:
        self.session.close()


class ModelDrafter:
    name = "draft-model"

    def __init__(self, lm: StepLM) -> None:
        self.lm = lm

    @property
    def layout(self) -> TokenLayout:
        return self.lm.layout

    def start(self, prompt: Prompt) -> ModelDraftSession:
        return ModelDraftSession(self.lm.start(prompt))
