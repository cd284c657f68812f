"""Step LMs: a causal LM seen as ``steps [T, G] -> logits [T, G, V]`` over an explicit KV cache.

Cache convention (as in gpt-fast): a session's cache holds every committed step except the last,
which is *pending*: the next forward feeds it together with the drafts, so one pass yields the
target's distribution at every draft position plus the bonus position. Rolling back a rejected
draft is ``truncate(n)``: a row length moved back in a position-addressed
:class:`~voicespec.engine.kv_cache.KVCache`, or a crop of a transformers ``DynamicCache``.

Sessions over one plain-torch stack share its cache, one row each, so the passes of many sessions
run as one batched forward (:class:`Pass`, :func:`forward_batch`).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from voicespec.engine.kv_cache import KVCache
from voicespec.engine.layout import Prompt, TokenLayout
from voicespec.engine.work import Work, run_grouped


class StepLM(Protocol):
    """Anything the engine can decode from: a layout plus sessions with a KV cache."""

    layout: TokenLayout

    def start(self, prompt: Prompt) -> "LMSession": ...


class LMSession:
    """One request's KV cache over a model. Subclasses define how steps become model inputs.

    ``stack``: a plain-torch forward over a position-addressed cache it owns (``pool``, and
    ``forward(embeds, cache, rows, counts)``, e.g. :class:`voicespec.lm.llama.LlamaStack`); the
    session holds one row of it until :meth:`close` (or until it is collected) and rolls back by
    moving that row's length. Its subclass says how a batch of blocks embeds (``embed_batch``)
    and how hidden states read out (``readout_batch``). Without a stack, the model's own ``transformers`` forward over a
    ``DynamicCache`` (``cache``: any architecture, and the oracle; ``_dynamic_logits``)."""

    def __init__(self, model: Any, prefix: int = 0, stack: Any = None, cache: Any = None) -> None:
        self.model = model
        self.stack = stack
        if stack is not None:
            self.cache: Any = stack.pool  # a KVCache, or without a stack a transformers DynamicCache
            self.row = self.cache.acquire()
            self.close = weakref.finalize(self, self.cache.release, self.row)  # runs once, here or on collection
        else:
            if cache is None:
                raise ValueError("a session without a stack needs its model's own cache")
            self.cache = cache
            self.close = lambda: None
        self.prefix = prefix  # cached positions that are not steps (a text prefix)
        self.length = 0  # cached steps

    def append(self, embeds: torch.Tensor) -> torch.Tensor:
        """Hidden states ``[1, T, D]`` of ``embeds [1, T, D]`` appended to this session's row."""
        return self.stack.forward(embeds, self.cache, [self.row])

    @classmethod
    def embed_batch(cls, sessions: list[LMSession], blocks: list[torch.Tensor], trees: list[Any] | None = None) -> torch.Tensor:
        """Input embeddings ``[B, T, D]`` of each session's block (``[T_b, G]``, at its positions
        ``length ..``; a tree's slot ``i`` at ``length + depth[i]``), padded to the longest: one
        embedding call for the whole batch."""
        raise NotImplementedError

    @classmethod
    def readout_batch(cls, sessions: list[LMSession], hidden: torch.Tensor, counts: list[int]) -> list[torch.Tensor]:
        """Logits ``[T_b, G, V]`` of each session's first ``counts[b]`` final hidden states ``[B, T, D]``."""
        raise NotImplementedError

    def _dynamic_logits(self, steps: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    @torch.inference_mode()
    def forward(self, steps: torch.Tensor) -> torch.Tensor:
        """Append ``steps`` (``[T, G]``) to the cache; return their logits ``[T, G, V]``."""
        if self.stack is not None:
            return forward_batch([self], [steps])[0]
        logits = self._dynamic_logits(steps)
        self.length += steps.shape[0]
        return logits

    def keep_path(self, start: int, path: list[int]) -> None:
        """After a tree pass whose root (slot 0) sat at step position ``start``: move the keys
        and values of the accepted slots ``path`` to positions ``start + 1 ..`` and reorder the
        last forward's hidden states (``hidden``, when kept) to root-then-path order, so the row
        and the hidden states read as if the path had been a chain."""
        if not isinstance(self.cache, KVCache):
            raise ValueError("draft trees need a position-addressed cache (a plain-torch stack)")
        base = self.prefix + start
        self.cache.move(self.row, [base + t for t in path], [base + 1 + j for j in range(len(path))])
        hidden = getattr(self, "hidden", None)
        if hidden is not None:
            self.hidden = hidden[[0, *path]]

    def truncate(self, length: int) -> None:
        """Roll the cache back to its first ``length`` steps."""
        if length < self.length:
            if isinstance(self.cache, KVCache):
                self.cache.truncate(self.row, self.prefix + length)
            else:
                self.cache.crop(length - self.length)
            self.length = length


@torch.inference_mode()
def forward_batch(sessions: list[LMSession], blocks: list[torch.Tensor], trees: list[Any] | None = None) -> list[torch.Tensor]:
    """``LMSession.forward`` of each session on its block (``[T_b, G]``), as one padded pass per
    stack: logits ``[T_b, G, V]`` each, equal to the unbatched ones within float tolerance.
    ``trees[b]``: a :class:`~voicespec.engine.tree.TreeShape` when block ``b`` is a draft tree
    (root first, breadth first), else None. A block's embeddings are by slot; a tree slot's
    track row is its depth's (``embed_batch`` reads rows by slot, so trees embed themselves)."""
    trees = trees or [None] * len(sessions)
    return run_grouped(list(zip(sessions, blocks, trees)), lambda job: None if job[0].stack is None else id(job[0].stack),
                       _forward_group)


def _forward_group(jobs: list[tuple[LMSession, torch.Tensor, Any]]) -> list[torch.Tensor]:
    """One padded pass over the ``(session, block, tree)`` jobs that share a stack (its cache); a
    session without one (the ``transformers`` oracle) runs alone."""
    group, steps, group_trees = (list(x) for x in zip(*jobs))
    if group[0].stack is None:
        if any(t is not None for t in group_trees):
            raise ValueError("draft trees need a position-addressed cache (a plain-torch stack)")
        return [s.forward(b) for s, b in zip(group, steps)]
    kind, counts = type(group[0]), [b.shape[0] for b in steps]
    h = group[0].stack.forward(kind.embed_batch(group, steps, group_trees), group[0].cache, [s.row for s in group], counts,
                               None if all(t is None for t in group_trees) else group_trees)
    out = kind.readout_batch(group, h, counts)
    for s, n in zip(group, counts):
        s.length += n
    return out


@dataclass(eq=False)
class Pass(Work):
    """A target pass over ``steps [T, G]`` of ``session``; the result is its logits ``[T, G, V]``.
    ``seconds`` is set to the time of the (batched) call that ran it, ``batch`` to the sessions in
    it and ``width`` to its longest block (every row is padded to it): the cost of a verify pass
    at the batch size and width it ran at, which the γ controller learns."""

    session: LMSession
    steps: torch.Tensor
    seconds: float = 0.0
    batch: int = 1
    width: int = 0
    tree: Any = None  # a TreeShape when ``steps`` is a draft tree (root first)

    @classmethod
    def run(cls, works: list[Pass]) -> list[torch.Tensor]:
        t = time.perf_counter()
        logits = forward_batch([w.session for w in works], [w.steps for w in works], [w.tree for w in works])
        dt = time.perf_counter() - t
        width = max(w.steps.shape[0] for w in works)
        for w in works:
            w.seconds, w.batch, w.width = dt, len(works), width
        return logits


@dataclass(eq=False)
class Prefill(Work):
    """A new session of ``lm`` over ``prompt``: its prompt appended to a fresh cache row; the
    result is the :class:`LMSession` (or the exception its prompt raised: one bad prompt fails
    its own request, not the batch). Newcomers in one scheduler tick prefill in one padded pass
    where the model allows (``start_batch``), not one after another (under a backlog the server
    admits a budget of them a tick). ``seconds``: that call's time."""

    lm: StepLM
    prompt: Prompt
    seconds: float = 0.0

    @classmethod
    def run(cls, works: list[Prefill]) -> list[LMSession | Exception]:
        return run_grouped(works, lambda w: id(w.lm), cls._start)

    @staticmethod
    def _start(group: list[Prefill]) -> list[LMSession | Exception]:
        """The prompts of one LM in one call where it can (``start_batch``), else one by one."""
        t = time.perf_counter()
        lm = group[0].lm
        start_batch = getattr(lm, "start_batch", None)
        if start_batch is not None:
            results = start_batch([w.prompt for w in group])
        else:
            results = []
            for w in group:
                try:
                    results.append(lm.start(w.prompt))
                except (ValueError, TypeError) as e:
                    results.append(e)
        dt = time.perf_counter() - t
        for w in group:
            w.seconds = dt
        return results
