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
from voicespec.engine.layout import LayoutState, Prompt, TokenLayout
from voicespec.engine.tree_shapes import DEFAULT_TREES, DynamicTree, StaticTree, parse_static_tree
from voicespec.engine.tree import DraftTree, TreeShape

if TYPE_CHECKING:  # the engine does not import model code; it is handed the models
    from voicespec.lm.codec_lm import CodecStepLM
    from voicespec.lm.draft_heads import DraftHeads


@dataclass(frozen=True)
class TreeDraft:
    """``tree``: the drafted tree's structure (a static shape, or grown this step);
    ``tokens [1 + nodes, G]``: slot 0 is the pending step, then the nodes, parents first;
    ``q [1 + nodes, V]``: the distribution each slot's children were drawn from (None: greedy)."""

    tree: DraftTree
    tokens: torch.Tensor
    q: torch.Tensor | None


def children_of(probs: torch.Tensor, b: int, generator: torch.Generator | None) -> torch.Tensor:
    """``[n, b]``: ``b`` distinct candidates per row of ``probs [n, V]``, drawn without
    replacement; where a row has fewer than ``b`` tokens with mass its last draw is repeated
    (a repeat is always rejected: its ``q`` was used up by the first)."""
    if bool(((probs > 0).sum(-1) >= b).all()):
        return torch.multinomial(probs, b, replacement=False, generator=generator)
    rows = []
    for row in probs:
        picks = torch.multinomial(row, min(b, int((row > 0).sum())), replacement=False, generator=generator)
        rows.append(torch.cat([picks, picks[-1:].repeat(b - picks.shape[0])]))
    return torch.stack(rows)


def fitted_trees(texts: list[str] | None) -> tuple[StaticTree, ...]:
    """Draft heads' ``draft_trees`` (text forms, fitted to their target by ``voicespec bench
    --fit-tree``) as trees; none fitted: :data:`DEFAULT_TREES`."""
    if not texts:
        return DEFAULT_TREES
    what = 'the draft heads\' draft_trees must be a list of static trees as text, e.g. ["3/2,1,0/1,1,1"]'
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ValueError(f"{what}, got {texts!r}")
    try:
        return tuple(parse_static_tree(t) for t in texts)
    except ValueError as e:
        raise ValueError(f"{what}: {e}") from None


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
    def propose_tree(self, ctx: DraftContext, spec: TreeShape | DynamicTree) -> TreeDraft:
        """A draft tree (see :mod:`voicespec.engine.tree`): one block call, one readout and one
        policy call per depth for all its nodes that have children. A static ``shape``: each
        node's children are its ``q``'s top tokens (greedy) or drawn from it without replacement
        (sampling; a node with fewer children than its depth's most takes the first of its draws,
        themselves a draw without replacement). A
        :class:`DynamicTree`: grown by the draft's path probabilities (greedy only)."""
        if isinstance(spec, DynamicTree):
            return self.drafter.dynamic_tree(ctx, spec)
        return self.drafter.tree(ctx, spec)

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
        # the adaptive controller's candidate trees (Medusa heads, sharing this class, draft none)
        self.trees = fitted_trees(heads.config.draft_trees) if self.drafts_trees else ()

    @property
    def layout(self) -> TokenLayout:
        return self.target.layout

    def start(self, prompt: Prompt) -> HeadsSession:
        return HeadsSession(self)

    def readout(self, f: torch.Tensor) -> torch.Tensor:
        """Logits ``[N, 1, V]`` (host, float32) of predicted hidden states ``f [N, D]``."""
        return self._readout(f).view(f.shape[0], 1, self.target.model.head_vocab).float().cpu()

    def _expand(self, ctx: DraftContext, f: torch.Tensor, steps: torch.Tensor, depth: int,
                states: list[LayoutState], paths: list[torch.Tensor] | None) -> tuple[torch.Tensor, torch.Tensor]:
        """One depth of a tree: nodes ``steps [n, G]`` (in ``states``, after ``paths``) read with
        the hidden states ``f [n, D]`` predicted for them; returns the states predicted after them
        ``[n, D]`` and their children's warped logits ``[n, V]``."""
        e = ctx.target.embed_at(steps, ctx.history.shape[0] - 1 + depth, together=True)[0]  # [n, D]
        f = self.block(f, e)
        return f, ctx.policy.warp_rows(self.readout(f), states, paths)[:, 0]

    def tree(self, ctx: DraftContext, shape: TreeShape) -> TreeDraft:
        policy, layout = ctx.policy, ctx.policy.layout
        history = policy.sampling.uses_history
        codes = [int(ctx.history[-1, 0])]  # per slot: its step's code (one per step: coarse-first)
        states = [ctx.state]  # per slot (the leaves' are never needed)
        paths = [ctx.generated] if history else None  # per slot: the generated steps up to and including it
        # q of each depth's nodes with children (the residual rule's; greedy and invariant need none)
        drawn: list[torch.Tensor] | None = [] if not policy.sampling.greedy and ctx.noise is None else None
        drawn_slots: list[int] = []  # their slots
        f, level, steps = ctx.features[None], [0], ctx.history[-1:]  # the current depth's nodes: f [n, D], steps [n, G]
        for d, group in enumerate(shape.counts):  # children of each node of ``level``
            if 0 in group:  # a per-node tree: only nodes with children are read out
                rows = [i for i, b in enumerate(group) if b]
                level, group, f, steps = [level[i] for i in rows], [group[i] for i in rows], f[rows], steps[rows]
            f, warped = self._expand(ctx, f, steps, d, [states[t] for t in level],
                                     None if paths is None else [paths[t] for t in level])
            b = max(group)
            if ctx.noise is not None:  # Gumbel top-b: the first child is the coupled draw
                picks = ctx.noise.perturb(warped[:, None], [ctx.position(d)] * len(level))[:, 0].topk(b, -1).indices
            elif drawn is None:
                picks = warped.topk(b, -1).indices  # [n, b]
            else:
                drawn.append(policy.probs(warped))
                drawn_slots.extend(level)
                picks = children_of(drawn[-1], b, ctx.generator)
            if min(group) == b:  # every node b children
                steps, parents, take = picks.reshape(-1, 1), [t for t in level for _ in range(b)], None
            else:  # each node its first ``group[i]`` candidates
                take = [i for i, c in enumerate(group) for _ in range(c)]
                steps = picks[take, [j for c in group for j in range(c)]].view(-1, 1)
                parents = [level[i] for i in take]
            new = steps.flatten().tolist()  # [n'], in parents' order
            level = list(range(len(codes), len(codes) + len(new)))
            codes.extend(new)
            if d + 1 < shape.depth:
                states.extend(layout.advance(states[t], c) for t, c in zip(parents, new))
                if paths is not None:
                    paths.extend(torch.cat([paths[t], steps[j: j + 1]]) for j, t in enumerate(parents))
                f = f[take] if take is not None else f if b == 1 else f.repeat_interleave(b, 0)
        q = None
        if drawn is not None:  # by slot; the leaves and the nodes without children propose nothing
            q_rows = torch.cat(drawn)  # [inner nodes, V]
            q = q_rows.new_zeros(len(codes), q_rows.shape[1])
            q[drawn_slots] = q_rows
        return TreeDraft(shape, torch.tensor(codes, dtype=ctx.history.dtype).view(-1, 1), q)

    def dynamic_tree(self, ctx: DraftContext, spec: DynamicTree) -> TreeDraft:
        """EAGLE-2's tree, greedy: each depth expands the ``top_k`` likeliest nodes of the last
        (by path probability under the draft) by their ``top_k`` likeliest tokens; the ``nodes``
        likeliest of all are verified. A child is never likelier than its parent, so the kept
        nodes form a tree (ties go to the shallower node)."""
        layout, k = ctx.policy.layout, spec.top_k
        drafted: list[tuple[float, int, int, int]] = []  # (-log path prob, depth, parent's index or -1, token)
        f, steps = ctx.features[None], ctx.history[-1:]  # the frontier: hidden states [n, D], steps [n, G]
        states, scores, ids = [ctx.state], torch.zeros(1), [-1]
        paths = [ctx.generated] if ctx.policy.sampling.uses_history else None  # for a repetition penalty
        for d in range(spec.depth):
            f, warped = self._expand(ctx, f, steps, d, states, paths)
            logp, tok = warped.log_softmax(-1).topk(k, -1)  # [n, k]
            cand = (scores[:, None] + logp).flatten()  # [n * k]
            done = torch.tensor([layout.is_done(s) for s in states]).repeat_interleave(k)
            cand = cand.masked_fill(done, float("-inf"))  # nothing follows the end
            base = len(drafted)
            tok = tok.flatten()
            for j, (c, t) in enumerate(zip(cand.tolist(), tok.tolist())):
                drafted.append((-c, d + 1, ids[j // k], t))
            if d + 1 == spec.depth:
                break
            keep = cand.topk(min(k, cand.shape[0])).indices
            keep = keep[cand[keep] > float("-inf")]
            if keep.numel() == 0:
                break
            rows = keep // k
            f, steps, scores = f[rows], tok[keep].view(-1, 1), cand[keep]
            states = [layout.advance(states[int(r)], steps[i]) for i, r in enumerate(rows)]
            if paths is not None:
                paths = [torch.cat([paths[int(r)], steps[i: i + 1]]) for i, r in enumerate(rows)]
            ids = [base + int(j) for j in keep]
        order = sorted((i for i, n in enumerate(drafted) if n[0] < float("inf")), key=lambda i: drafted[i][:2])[: spec.nodes]
        order.sort(key=lambda i: (drafted[i][1], i))  # parents first
        slot = {-1: 0, **{i: s for s, i in enumerate(order, start=1)}}
        parents = (-1, *(slot[drafted[i][2]] for i in order))
        tokens = torch.tensor([int(ctx.history[-1, 0]), *(drafted[i][3] for i in order)]).view(-1, 1)
        return TreeDraft(DraftTree(parents), tokens, None)

    def next_logits_for(self, ctx: DraftContext, gamma: int):
        """The recurrent draft: position ``j`` reads the state predicted at ``j - 1`` and the step drafted there."""
        session, start = ctx.target, ctx.history.shape[0] - 1  # the pending step's position
        state = {"f": ctx.features[None]}

        def next_logits(j: int, step: torch.Tensor) -> torch.Tensor:
            e = session.embed_at(step[None], start + j)[0]  # [1, D]
            state["f"] = self.block(state["f"], e)
            return self.readout(state["f"])

        return next_logits
