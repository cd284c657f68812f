"""Distributions of measurements: percentiles and pairwise ratios."""

from __future__ import annotations

import pytest

from voicespec.bench.dist import percentiles, ratio_summary


def test_percentiles_and_pairwise_ratios():
    p = percentiles(list(range(1, 101)))
    assert p["p50"] == pytest.approx(50.5) and p["p95"] == pytest.approx(95.05) and p["p99"] == pytest.approx(99.01)
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None}
    assert ratio_summary([1.2, 0.8, 1.0, 3.0]) == {"median": 1.1, "min": 0.8, "max": 3.0, "pairs": 4}
    assert ratio_summary([])["median"] is None

