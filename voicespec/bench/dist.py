"""Distribution summaries: percentiles of latencies, and pairwise ratios robust to machine noise."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PERCENTILES = (50, 95, 99)


def percentiles(values: Sequence[float], qs: Sequence[int] = PERCENTILES) -> dict[str, float | None]:
    """``{"p50": .., "p95": .., "p99": ..}`` (linear interpolation); None for an empty sample."""
    if not len(values):
        return {f"p{q}": None for q in qs}
    return {f"p{q}": float(np.percentile(values, q)) for q in qs}


def ratio_summary(ratios: Sequence[float]) -> dict[str, float | int | None]:
    """Median, min and max of per-pair ratios. Each ratio compares two runs made back to back on
    the same prompt, so slow drifts of the machine cancel instead of biasing the result."""
    if not len(ratios):
        return {"median": None, "min": None, "max": None, "pairs": 0}
    return {"median": float(np.median(ratios)), "min": float(min(ratios)), "max": float(max(ratios)), "pairs": len(ratios)}
