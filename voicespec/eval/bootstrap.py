"""Intervals for corpus-level figures: a percentile bootstrap that resamples whole sentences.

A corpus WER is a ratio (edits summed over sentences / reference words summed over sentences),
and a mean DNSMOS is the same ratio with one "word" per clip; with several seeds a sentence
contributes one term per seed. Sentences are the unit that varies (some are hard for any voice),
so the bootstrap draws sentences with replacement and keeps all of a drawn sentence's seeds
together. On 25 sentences the interval is wide: that width is the point of reporting it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

BOOTSTRAP_DRAWS = 2000
LEVEL = 0.95


def ratio_interval(nums: Sequence[float], dens: Sequence[float], groups: Sequence[int],
                   draws: int = BOOTSTRAP_DRAWS, level: float = LEVEL, seed: int = 0) -> tuple[float, float, float]:
    """``(sum(nums) / sum(dens), low, high)``: the pooled ratio and its ``level`` percentile
    bootstrap interval, resampling the distinct ``groups`` (sentence ids) with replacement."""
    if not (len(nums) == len(dens) == len(groups)) or not len(nums):
        raise ValueError("nums, dens and groups must be non-empty and of one length")
    keys, inverse = np.unique(np.asarray(groups), return_inverse=True)
    num = np.bincount(inverse, weights=np.asarray(nums, dtype=np.float64), minlength=len(keys))
    den = np.bincount(inverse, weights=np.asarray(dens, dtype=np.float64), minlength=len(keys))
    value = float(num.sum() / max(den.sum(), 1e-12))
    pick = np.random.default_rng(seed).integers(0, len(keys), size=(draws, len(keys)))
    stats = num[pick].sum(1) / np.maximum(den[pick].sum(1), 1e-12)
    low, high = np.quantile(stats, [(1 - level) / 2, (1 + level) / 2])
    return value, float(low), float(high)
