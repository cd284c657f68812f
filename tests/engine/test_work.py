"""The one "group by key, run, scatter back" helper every batched call is built on."""

import pytest

from voicespec.engine.work import Work, run_grouped, run_works


def test_run_grouped_calls_once_per_key_and_keeps_input_order():
    calls = []

    def run(group):
        calls.append(list(group))
        return [f"{x}!" for x in group]

    items = ["a1", "b1", "a2", "c1", "b2"]
    assert run_grouped(items, lambda s: s[0], run) == ["a1!", "b1!", "a2!", "c1!", "b2!"]
    assert calls == [["a1", "a2"], ["b1", "b2"], ["c1"]]  # members in input order, groups by first appearance


def test_run_grouped_refuses_a_result_count_that_does_not_match():
    with pytest.raises(RuntimeError, match="2 results for 3 items"):
        run_grouped([1, 2, 3], lambda x: 0, lambda group: group[:2])


def test_run_works_batches_by_class():
    class Double(Work):
        batches: list[int] = []

        def __init__(self, x):
            self.x = x

        @classmethod
        def run(cls, works):
            cls.batches.append(len(works))
            return [2 * w.x for w in works]

    class Negate(Double):
        batches: list[int] = []

        @classmethod
        def run(cls, works):
            cls.batches.append(len(works))
            return [-w.x for w in works]

    works = [Double(1), Negate(2), Double(3), Negate(4), Double(5)]
    assert run_works(works) == [2, -2, 6, -4, 10]
    assert Double.batches == [3] and Negate.batches == [2]
