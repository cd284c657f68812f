"""A separate, smaller draft LM with the target's layout and vocabulary and its own KV cache."""

from __future__ import annotations

import torch

from voicespec.engine.layout import Prompt, TokenLayout
from voicespec.engine.step_lm import LMSession, StepLM
from voicespec.engine.drafters.base import Draft, DraftContext


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
        layout, policy = ctx.policy.layout, ctx.policy
        feed = ctx.history[self.session.length :]
        state, generated = ctx.state, ctx.generated
        steps, probs = [], []
        for _ in range(gamma):
            if layout.is_done(state):
                break
            raw = self.session.forward(feed)[-1:]
            warped = policy.warp(raw, state, generated[:0], generated)[0]
            token = policy.choose(warped, ctx.generator)
            steps.append(token)
            if not policy.sampling.greedy:
                probs.append(policy.probs(warped))
            state = layout.advance(state, token)
            generated = torch.cat([generated, token.unsqueeze(0)])
            feed = token.unsqueeze(0)
        if not steps:
            return Draft(ctx.history[:0])
        return Draft(torch.stack(steps), torch.stack(probs) if probs else None)

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
