"""A cache of decoded sentences: the target's verified frames, replayed instead of decoded again.

Call-centre phrases and UI prompts repeat. What the LM makes of a sentence is fixed by the voice,
the sentence's unit ids, the sampling options, the sentence's seed and step cap — and, when
sampling, by the drafter and a *fixed* γ (speculative sampling draws differently per draft; an
adaptive γ follows measured timings, so such a sentence is never cached). Greedy output is the
same whatever the drafter and γ (exactness), so those are left out of a greedy key. Frames are
kept with the chunk boundaries the decode produced and replayed through the codec the same way,
so a hit's audio is bit-identical to what a miss would have produced. Bounded by bytes, least
recently used first out; safe to share between threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

import torch

from voicespec.engine.config import DecodeConfig


def frame_key(target: object, ids: list[int], config: DecodeConfig, drafter: str, speed: float = 1.0) -> tuple | None:
    """What determines a sentence's frames, or None when nothing fixed does (no seed while
    sampling; adaptive γ under the residual coupling, whose tokens depend on the drafts). ``config`` is the sentence's own (its seed and step cap); ``target`` the
    LM object decoding it (a voice whose target is swapped must not replay the old one's frames);
    ``speed`` changes the durations, so the prompt."""
    if config.sampling.greedy:
        return ("greedy", id(target), tuple(ids), speed, config.sampling, config.max_steps)
    if config.seed is None:
        return None
    if config.sampling.coupling == "invariant" and not config.sampling.lossy_top_k:  # the seed's tokens, however drafted
        return ("sampled", id(target), tuple(ids), speed, config.sampling, config.max_steps, config.seed)
    if config.gamma == "auto":
        return None
    gamma = 0 if drafter == "none" else config.gamma
    return ("sampled", id(target), tuple(ids), speed, config.sampling, config.max_steps, config.seed,
            drafter if gamma else "none", gamma)


@dataclass
class CacheCounts:
    hits: int = 0
    misses: int = 0
    evictions: int = 0


class FrameCache:
    """``get(key)`` / ``put(key, chunks)``; ``chunks`` the per-step frames ``[K, n]`` of one sentence."""

    def __init__(self, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self.bytes = 0
        self.counts = CacheCounts()
        self._entries: OrderedDict[tuple, tuple[list[torch.Tensor], int]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: tuple) -> list[torch.Tensor] | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.counts.misses += 1
                return None
            self._entries.move_to_end(key)
            self.counts.hits += 1
            return entry[0]

    def put(self, key: tuple, chunks: list[torch.Tensor]) -> None:
        size = sum(c.numel() * c.element_size() for c in chunks)
        if size > self.max_bytes:
            return
        with self._lock:
            if key in self._entries:
                return
            self._entries[key] = ([c.clone() for c in chunks], size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, old) = self._entries.popitem(last=False)
                self.bytes -= old
                self.counts.evictions += 1
