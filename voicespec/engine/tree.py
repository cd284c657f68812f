"""Tree verification: several candidates per draft position, checked in one target pass (SpecInfer, EAGLE).

A static tree is given by its branching per depth, e.g. ``(2, 2, 1)``: two candidates for the
first drafted step, two continuations of each, one more after each of those (2 + 4 + 4 = 10
nodes); or by its children per node, depth by depth, e.g. ``3/2,1,0/1,1,1``: the likelier a
node's path, the more candidates it gets (a tree fitted to measured acceptance,
:mod:`voicespec.bench.tree_fit`). Nodes are numbered breadth first, slot 0 being the pending step (the root). One target
pass reads every node at once: node ``t`` sits at RoPE position ``start + depth[t]`` and attends
the committed prefix, its ancestors and itself (``ancestors``); its keys and values are written at
slot ``start + t`` and the accepted path is moved into place afterwards
(:meth:`~voicespec.engine.kv_cache.KVCache.move`).

Exactness (pure functions, one token per step, ``G = 1``):
- greedy: walk down while the target's argmax is among a node's children (they are distinct, so
  at most one matches); the first miss commits the argmax;
- sampling: children of a node are drawn *without replacement* from the drafter's ``q``; each is
  accepted with probability ``min(1, p(c)/q(c))`` and on rejection ``p`` becomes
  ``norm(max(p - q, 0))`` and ``q`` loses ``c`` and is renormalised (recursive rejection sampling,
  Jeon et al. 2024): the output is distributed as plain sampling from the target.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

import torch

from voicespec.engine.tree_shapes import StaticTree, check_branching, tree_counts, tree_text
from voicespec.engine.sampling import sample
from voicespec.engine.verify import residual

class DraftTree:
    """A draft tree by its parents: slot 0 is the root (the pending step, parent -1), and every
    other slot's parent is an earlier slot, so the slots are in an order where parents come first
    (breadth first for a :class:`TreeShape`; a dynamic tree is built so). Static or drafted anew
    every step, the pass and the rules read only this."""

    def __init__(self, parents: tuple[int, ...]) -> None:
        parents = tuple(parents)
        if not parents or parents[0] != -1 or any(not 0 <= p < t for t, p in enumerate(parents) if t):
            raise ValueError(f"a draft tree's parents must be -1 for the root, then earlier slots, got {parents!r}")
        self.parents = parents

    @property
    def nodes(self) -> int:
        """Draft nodes (the root excluded)."""
        return len(self.parents) - 1

    @cached_property
    def depths(self) -> torch.Tensor:
        """``[1 + nodes]``: each slot's depth (its RoPE offset from the root)."""
        d = [0]
        for p in self.parents[1:]:
            d.append(d[p] + 1)
        return torch.tensor(d)

    @cached_property
    def depth(self) -> int:
        return int(self.depths.max())

    @cached_property
    def ancestors(self) -> torch.Tensor:
        """``[1 + nodes, 1 + nodes]`` bool: ``[t, u]`` when slot ``u`` is ``t`` or one of its ancestors."""
        n = len(self.parents)
        anc = torch.eye(n, dtype=torch.bool)
        for t in range(1, n):
            anc[t] |= anc[self.parents[t]]
        return anc

    @cached_property
    def _children(self) -> tuple[list[int], ...]:
        out: tuple[list[int], ...] = tuple([] for _ in self.parents)
        for t, p in enumerate(self.parents[1:], start=1):
            out[p].append(t)
        return out

    def children(self, slot: int) -> list[int]:
        return self._children[slot]


class TreeShape(DraftTree):
    """A static tree (:func:`~voicespec.engine.controller.check_branching`): ``branching`` as
    children per depth, every node of a depth alike (``(2, 2, 1)``), or as children per node,
    depth by depth; ``counts``: the latter form of either. Slots breadth first, a node's children
    in its candidates' order (the first is its likeliest or first drawn)."""

    def __init__(self, branching: StaticTree) -> None:
        self.branching = check_branching(branching)
        self.counts = tree_counts(self.branching)
        parents, level = [-1], [0]
        for group in self.counts:
            nxt = []
            for node, b in zip(level, group):
                for _ in range(b):
                    parents.append(node)
                    nxt.append(len(parents) - 1)
            level = nxt
        super().__init__(tuple(parents))

    def __str__(self) -> str:
        return tree_text(self.branching)


@lru_cache(maxsize=64)
def static_tree(branching: StaticTree) -> TreeShape:
    """The :class:`TreeShape` of ``branching``, made once (its ancestor mask and depths with it)
    for every request that drafts it."""
    return TreeShape(branching)


@dataclass(frozen=True)
class TreeVerdict:
    """``path``: accepted draft slots, root to leaf; ``steps [len(path) + 1, 1]``: their tokens
    and then one token of the target's own."""

    path: list[int]
    steps: torch.Tensor

    @property
    def accepted_steps(self) -> int:
        return len(self.path)


def verify_tree_greedy(shape: DraftTree, tokens: torch.Tensor, logits: torch.Tensor) -> TreeVerdict:
    """``tokens [1 + nodes]`` (slot 0: the pending step's token); ``logits [1 + nodes, V]``: the
    target's warped logits after each slot."""
    best, toks = logits.argmax(-1).tolist(), tokens.tolist()  # the walk reads ints, not tensor elements
    path, slot = [], 0
    while True:
        match = [c for c in shape.children(slot) if toks[c] == best[slot]]
        if not match:
            break
        slot = match[0]
        path.append(slot)
    return TreeVerdict(path, torch.tensor([*(toks[c] for c in path), best[slot]], dtype=tokens.dtype).view(-1, 1))


def verify_tree_sampling(shape: DraftTree, tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
                         generator: torch.Generator | None) -> TreeVerdict:
    """``tokens [1 + nodes]``; ``q [1 + nodes, V]``: the distribution each slot's *children* were
    drawn from, without replacement, in slot order; ``p [1 + nodes, V]``: the target's after each slot."""
    path, slot = [], 0
    while True:
        target, proposal = p[slot], q[slot].clone()
        for c in shape.children(slot):
            tok = int(tokens[c])
            u = float(torch.rand((), generator=generator, dtype=p.dtype))
            if u * float(proposal[tok]) < float(target[tok]):
                path.append(c)
                slot = c
                break
            target = residual(target, proposal, tok)
            proposal[tok] = 0
            total = proposal.sum()
            proposal = proposal / total if total > 0 else proposal
        else:
            return TreeVerdict(path, torch.cat([tokens[path], sample(target, generator).view(1)]).view(-1, 1))
