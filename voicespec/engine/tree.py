"""Tree verification: several candidates per draft position, checked in one target pass (SpecInfer, EAGLE).

A static tree is given by its branching per depth, e.g. ``(2, 2, 1)``: two candidates for the
first drafted step, two continuations of each, one more after each of those (2 + 4 + 4 = 10
nodes). Nodes are numbered breadth first, slot 0 being the pending step (the root). One target
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
from functools import cached_property

import torch

from voicespec.engine.controller import check_branching
from voicespec.engine.sampling import sample
from voicespec.engine.verify import residual

@dataclass(frozen=True)
class TreeShape:
    """``branching[i]``: children of every node at depth ``i`` (the root, the pending step, is depth 0)."""

    branching: tuple[int, ...]

    def __post_init__(self) -> None:
        check_branching(self.branching)

    @property
    def depth(self) -> int:
        return len(self.branching)

    @cached_property
    def parents(self) -> tuple[int, ...]:
        """Parent slot of each slot (slot 0, the root, is its own: -1)."""
        parents, level = [-1], [0]
        for b in self.branching:
            nxt = []
            for node in level:
                for _ in range(b):
                    parents.append(node)
                    nxt.append(len(parents) - 1)
            level = nxt
        return tuple(parents)

    @property
    def nodes(self) -> int:
        """Draft nodes (the root excluded)."""
        total, width = 0, 1
        for b in self.branching:
            width *= b
            total += width
        return total

    @cached_property
    def depths(self) -> torch.Tensor:
        """``[1 + nodes]``: each slot's depth (its RoPE offset from the root)."""
        d = [0]
        for p in self.parents[1:]:
            d.append(d[p] + 1)
        return torch.tensor(d)

    @cached_property
    def ancestors(self) -> torch.Tensor:
        """``[1 + nodes, 1 + nodes]`` bool: ``[t, u]`` when slot ``u`` is ``t`` or one of its ancestors."""
        n = len(self.parents)
        anc = torch.eye(n, dtype=torch.bool)
        for t in range(1, n):
            anc[t] |= anc[self.parents[t]]
        return anc

    def children(self, slot: int) -> list[int]:
        return [t for t, p in enumerate(self.parents) if p == slot]

    def __str__(self) -> str:
        return ",".join(map(str, self.branching))


@dataclass(frozen=True)
class TreeVerdict:
    """``path``: accepted draft slots, root to leaf; ``steps [len(path) + 1, 1]``: their tokens
    and then one token of the target's own."""

    path: list[int]
    steps: torch.Tensor

    @property
    def accepted_steps(self) -> int:
        return len(self.path)


def verify_tree_greedy(shape: TreeShape, tokens: torch.Tensor, logits: torch.Tensor) -> TreeVerdict:
    """``tokens [1 + nodes]`` (slot 0: the pending step's token); ``logits [1 + nodes, V]``: the
    target's warped logits after each slot."""
    best = logits.argmax(-1)
    path, slot = [], 0
    while True:
        match = [c for c in shape.children(slot) if tokens[c] == best[slot]]
        if not match:
            break
        slot = match[0]
        path.append(slot)
    return TreeVerdict(path, torch.cat([tokens[path], best[slot: slot + 1]]).view(-1, 1))


def verify_tree_sampling(shape: TreeShape, tokens: torch.Tensor, q: torch.Tensor, p: torch.Tensor,
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
