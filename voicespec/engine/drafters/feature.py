"""Feature-level drafting (EAGLE-style): predict the target's next hidden state, read it out with the target's heads.

The draft holds no cache and no vocabulary-sized weights of its own: from the hidden state ``f``
that predicted the pending step (the verify pass computed it anyway) and the target's embedding
of that step, one small block (:class:`~voicespec.lm.draft_heads.DraftHeads`) predicts the next
hidden state; the target's heads turn it into logits; the drafted step's embedding and the
predicted state feed the next block call. Rejection needs no rollback: the next proposal starts
again from the target's own state. A drafted step costs one block, one head and the policy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from voicespec.engine.drafters.base import Draft, DraftContext, draft_loop
from voicespec.engine.layout import Prompt, TokenLayout
from voicespec.engine.policy import WarpWork
from voicespec.engine.tree import TreeShape

if TYPE_CHECKING:  # the engine does not import model code; it is handed the models
    from voicespec.lm.codec_lm import CodecStepLM
    from voicespec.lm.draft_heads import DraftHeads


@dataclass(frozen=True)
class TreeDraft:
    """``tokens [1 + nodes, G]``: slot 0 is the pending step, then the tree breadth first;
    ``q [1 + nodes, V]``: the distribution each slot's children were drawn from (None: greedy)."""

    tokens: torch.Tensor
    q: torch.Tensor | None


def children_of(warped: torch.Tensor, b: int, probs: torch.Tensor | None, generator: torch.Generator | None) -> torch.Tensor:
    """``b`` distinct candidates from warped logits ``[V]``: the top ``b`` (greedy, ``probs`` None)
    or drawn without replacement from ``probs``; when fewer than ``b`` tokens have mass, the last
    is repeated (a repeat is always rejected: its ``q`` was used up by the first)."""
    if probs is None:
        return warped.topk(b).indices
    n = int((probs > 0).sum())
    picks = torch.multinomial(probs, min(b, n), replacement=False, generator=generator)
    return torch.cat([picks, picks[-1:].repeat(b - picks.shape[0])])


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

    @torch.inference_mode()
    def propose_tree(self, ctx: DraftContext, shape: TreeShape) -> TreeDraft:
        """A draft tree of ``shape`` (see :mod:`voicespec.engine.tree`): one block call per depth
        for all its nodes; each node's children are its ``q``'s top tokens (greedy) or drawn from
        it without replacement (sampling), each node warped with the policy along its own path."""
        return self.drafter.tree(ctx, shape)

    def rollback(self, keep: int) -> None:
        """Nothing to undo: proposals start from the target's state."""

    def close(self) -> None:
        """Nothing held."""


class FeatureDrafter:
    """``heads`` (kind ``feature``) over ``target``'s hidden states, embeddings and heads."""

    name = "feature"
    max_gamma = 1 << 30  # recurrent: any length
    drafts_trees = True  # HeadsSession.propose_tree

    def __init__(self, target: CodecStepLM, heads: DraftHeads, name: str | None = None) -> None:
        if heads.config.hidden_size != target.model.config.hidden_size:
            raise ValueError(f"draft heads of width {heads.config.hidden_size} do not fit a target of width "
                             f"{target.model.config.hidden_size}")
        if not target.model.config.coarse_first:
            raise ValueError("draft heads read one token per step: they need a coarse-first target")
        self.target, self.heads = target, heads.eval()
        self.name = name or self.name
        # (f, e [N, D]) -> predicted f [N, D]; Medusa's heads run all at once instead
        self.block = heads.block() if heads.config.kind == "feature" else None
        self._readout = heads.readout(target.model.heads.weight)  # the target's own heads, [N, D] -> [N, V]

    @property
    def layout(self) -> TokenLayout:
        return self.target.layout

    def start(self, prompt: Prompt) -> HeadsSession:
        return HeadsSession(self)

    def readout(self, f: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, 1, V]`` (host, float32) of predicted hidden states ``f [N, D]``."""
        return self._readout(f).view(f.shape[0], 1, self.target.model.head_vocab).float().cpu()

    def tree(self, ctx: DraftContext, shape: TreeShape) -> TreeDraft:
        session, start, policy = ctx.target, ctx.history.shape[0] - 1, ctx.policy
        tokens = [ctx.history[-1]]  # per slot: its step [G]
        paths = [ctx.generated]  # per slot: the generated steps up to and including it
        states = [ctx.state]
        q = [] if not policy.sampling.greedy else None
        f = ctx.features[None]  # [n, D]: the inputs of the current depth's nodes
        level = [0]
        for d, b in enumerate(shape.branching):
            e = session.embed_at(torch.stack([tokens[t] for t in level]), start + d, together=True)[0]  # [n, D]
            f_out = self.block(f, e)
            raw = self.readout(f_out)  # [n, 1, V]
            works = [policy.warp_work(raw[i: i + 1], states[t], paths[t][:0], paths[t]) for i, t in enumerate(level)]
            warped = [w[0] for w in WarpWork.run(works)]  # [G=1, V] each
            nxt, f_rows = [], []
            for i, (t, w) in enumerate(zip(level, warped)):
                if q is not None:
                    q.append(policy.probs(w)[0])
                picks = children_of(w[0], b, q[-1] if q is not None else None, ctx.generator)
                for tok in picks:
                    step = tok.view(1)
                    tokens.append(step)
                    paths.append(torch.cat([paths[t], step[None]]))
                    states.append(ctx.policy.layout.advance(states[t], step))
                    nxt.append(len(tokens) - 1)
                    f_rows.append(i)
            f, level = f_out[f_rows], nxt
        if q is not None:  # the leaves propose nothing: zeros never read
            q += [q[0].new_zeros(q[0].shape)] * (len(tokens) - len(q))
        return TreeDraft(torch.stack(tokens), None if q is None else torch.stack(q))

    def next_logits_for(self, ctx: DraftContext, gamma: int):
        """The recurrent draft: position ``j`` reads the state predicted at ``j - 1`` and the step drafted there."""
        session, start = ctx.target, ctx.history.shape[0] - 1  # the pending step's position
        state = {"f": ctx.features[None]}

        def next_logits(j: int, step: torch.Tensor) -> torch.Tensor:
            e = session.embed_at(step[None], start + j)[0]  # [1, D]
            state["f"] = self.block(state["f"], e)
            return self.readout(state["f"])

        return next_logits
