"""Model-free n-gram (prompt-lookup) drafting over the request's own history.

Codec streams repeat — silences, sustained vowels, held noise — so the continuation of the most
recent earlier occurrence of the current suffix is often what comes next. The index is updated
incrementally as steps are committed, so a lookup costs O(n) whether or not anything matches.
When the match overlaps the present, the continuation is extended periodically (a run of one
repeated step continues as that step).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from voicespec.engine.layout import Prompt
from voicespec.engine.drafters.base import Draft, DraftContext, legal_prefix


class NGramSession:
    def __init__(self, max_n: int, min_n: int) -> None:
        self.min_n, self.max_n = min_n, max_n
        self.rows: list[tuple[int, ...]] = []
        self.index: dict[int, dict[tuple, int]] = {n: {} for n in range(min_n, max_n + 1)}

    def _catch_up(self, history: torch.Tensor) -> None:
        rows = self.rows
        for row in history[len(rows) :].tolist():
            i = len(rows)  # the step about to be appended continues every n-gram ending before it
            for n, table in self.index.items():
                if i >= n:
                    table[tuple(rows[i - n : i])] = i
            rows.append(tuple(row))

    def match(self, history: torch.Tensor) -> int | None:
        """Start of the continuation of the longest suffix seen before, or None."""
        self._catch_up(history)
        rows, L = self.rows, len(self.rows)
        for n in range(min(self.max_n, L), self.min_n - 1, -1):
            j = self.index[n].get(tuple(rows[L - n :]))
            if j is not None:
                return j
        return None

    def propose(self, ctx: DraftContext, gamma: int) -> Draft:
        j = self.match(ctx.history)
        if j is None or gamma == 0:
            return Draft(ctx.history[:0])
        period = ctx.history.shape[0] - j
        idx = j + torch.arange(gamma) % period
        return Draft(legal_prefix(ctx, ctx.history[idx]))

    def rollback(self, keep: int) -> None:
        """Nothing to undo: only committed steps are ever indexed."""

    def close(self) -> None:
        """Nothing to give back: the index lives and dies with the session."""


@dataclass(frozen=True)
class NGramDrafter:
    """``max_n``..``min_n``: suffix lengths tried, longest first."""

    max_n: int = 4
    min_n: int = 1
    name: str = "ngram"
    layout: None = None

    def __post_init__(self) -> None:
        if not 1 <= self.min_n <= self.max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={self.min_n}, max_n={self.max_n}")

    def start(self, prompt: Prompt) -> NGramSession:
        return NGramSession(self.max_n, self.min_n)
