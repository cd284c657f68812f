"""What every drafter sees and returns. A new drafter is one file implementing :class:`Drafter`."""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Protocol

import torch

from voicespec.engine.layout import LayoutState, Prompt, TokenLayout
from voicespec.engine.noise import PositionNoise
from voicespec.engine.policy import TokenPolicy
from voicespec.engine.sampling import sample


@dataclass(frozen=True)
class DraftContext:
    """The committed request state at the moment of drafting.

    ``history``: every committed step, prompt steps first (``[N, G]``; the last one is pending in
    the caches). ``n_prompt``: how many of them are prompt steps. ``state``: the layout state after
    the generated steps. ``target``: the target's session (its model, cache row and embeddings,
    for drafters built on the target). ``features``: the target's final hidden state ``[D]`` that
    predicted the pending step (on the target's device), when the target exposes one. ``noise``:
    sampling with the invariant coupling, where a draft is the argmax of its warped logits plus the
    noise of its position (the target's own draw, when the draft is good).
    """

    history: torch.Tensor
    n_prompt: int
    state: LayoutState
    policy: TokenPolicy
    generator: torch.Generator | None
    target: Any = None
    features: torch.Tensor | None = None
    noise: PositionNoise | None = None  # the invariant coupling's: draft j proposes its own noise's argmax

    def position(self, j: int) -> int:
        """The generated position of draft step ``j`` (0: the step after the pending one)."""
        return self.history.shape[0] - self.n_prompt + j

    @property
    def generated(self) -> torch.Tensor:
        return self.history[self.n_prompt :]


@dataclass(frozen=True)
class Draft:
    """Proposed steps ``[γ', G]`` (γ' ≤ γ, possibly 0) and, for sampling with a stochastic
    drafter, the probabilities they were drawn from (``[γ', G, V]``); None means one-hot."""

    steps: torch.Tensor
    probs: torch.Tensor | None = None


class DraftSession(Protocol):
    """A drafter's per-request state (caches, indexes)."""

    def propose(self, ctx: DraftContext, gamma: int) -> Draft:
        """Up to ``gamma`` steps continuing ``ctx.history``."""

    def rollback(self, keep: int) -> None:
        """Only the first ``keep`` steps of the history are still valid (the rest was rejected)."""

    def close(self) -> None:
        """The request is over: give back what it holds (cache rows)."""


class Drafter(Protocol):
    """Shared across requests (holds weights, settings); ``start`` makes the per-request part.

    ``layout``: the layout the drafter's model was trained for, or None when it works with any.
    """

    name: str
    layout: TokenLayout | None

    def start(self, prompt: Prompt) -> DraftSession: ...


def legal_prefix(ctx: DraftContext, steps: torch.Tensor) -> torch.Tensor:
    """The longest prefix of ``steps`` whose every token is legal where it would land, and that
    stops at the end of the utterance. A draft token the target may not emit can never be accepted,
    so proposing it would only waste verify work."""
    layout = ctx.policy.layout
    state = ctx.state
    for i, step in enumerate(steps):
        if layout.is_done(state) or not bool(layout.mask(state).gather(1, step.unsqueeze(1)).all()):
            return steps[:i]
        state = layout.advance(state, step)
    return steps


def draft_loop(ctx: DraftContext, gamma: int, next_logits: Callable[[int, torch.Tensor], torch.Tensor]) -> Draft:
    """Up to ``gamma`` steps, each drawn with the target's own policy (masks, warpers, generator).

    ``next_logits(j, step)``: raw logits ``[1, G, V]`` of draft position ``j`` (0-based), after
    ``step`` (``[G]``: the pending step for ``j = 0``, then the step drafted at ``j - 1``).
    Stops early at the end of the utterance."""
    layout, policy = ctx.policy.layout, ctx.policy
    state, generated = ctx.state, ctx.generated
    step = ctx.history[-1]
    steps, probs = [], []
    greedy, history = policy.sampling.greedy, policy.sampling.uses_history
    for j in range(gamma):
        if layout.is_done(state):
            break
        warped = policy.warp_rows(next_logits(j, step), [state], [generated])[0]
        if greedy:
            step = warped.argmax(-1)
        elif ctx.noise is not None:
            step = ctx.noise.perturb(warped[None], [ctx.position(j)])[0].argmax(-1)
        else:
            probs.append(policy.probs(warped))
            step = sample(probs[-1], ctx.generator)
        steps.append(step)
        state = layout.advance(state, step)
        if history:  # only the repetition penalty reads the drafted steps back
            generated = torch.cat([generated, step.unsqueeze(0)])
    if not steps:
        return Draft(ctx.history[:0])
    return Draft(torch.stack(steps), torch.stack(probs) if probs else None)
