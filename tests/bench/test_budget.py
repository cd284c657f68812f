"""The latency budget: per-method verdicts and the capacity of a load sweep."""

from __future__ import annotations

from voicespec.bench.budget import budget_table, capacity, judge
from voicespec.bench.listeners import LoadLevel


def test_budget_verdicts():
    assert judge("a", 120.0, 0, 150.0).passed
    slow = judge("b", 180.0, 0, 150.0)
    assert not slow.passed and "TTFA p95 180 ms > 150 ms" in slow.reason
    both = judge("c", 180.0, 2, 150.0)
    assert not both.passed and "2 underruns" in both.reason and "TTFA" in both.reason
    assert judge("d", 900.0, 0, None).passed  # no budget: underruns only
    assert not judge("e", None, 0, 150.0).passed  # no audio at all
    table = budget_table({"x": {"ttfa_ms": {"p95": 100.0}, "underruns": 0},
                          "y": {"ttfa_ms": {"p95": 100.0}, "underruns": 1}}, 150.0)
    assert [(v.method, v.passed) for v in table] == [("x", True), ("y", False)]


def _level(n: int, p95: float, underruns: int = 0, errors: tuple[str, ...] = ()) -> dict:
    return LoadLevel("m", n, {"p50": p95, "p95": p95, "p99": p95}, underruns, int(underruns > 0), 0.0, None,
                     {"p50": 0.5, "p95": 0.5, "p99": 0.5}, list(errors)).to_dict()


def test_capacity_is_the_last_level_of_an_unbroken_run_of_passes():
    levels = [_level(4, 90, underruns=3), _level(1, 50), _level(2, 80), _level(8, 60)]
    assert capacity(levels, None) == 2  # 8 passing after 4 failed does not count
    assert capacity(levels, 70.0) == 1  # the budget cuts at 2 clients
    assert capacity([_level(1, 50, errors=("ConnectionError",))], None) == 0
    assert capacity([], None) == 0

