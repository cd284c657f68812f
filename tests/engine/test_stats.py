"""Per-request decoding statistics: merging sentences' stats adds every count and time."""

from __future__ import annotations

from dataclasses import fields

from voicespec.engine.stats import DecodeStats


def test_merge_adds_every_count_and_time_tree_passes_included():
    """Issue 37: ``merge`` dropped ``tree_passes``, so a context's ``done`` always said 0."""
    a = DecodeStats(target_passes=3, tree_passes=2, verify_s=0.5, per_position_drafted=[2], per_position_accepted=[1],
                    gammas=[4, 4, 3])
    b = DecodeStats(target_passes=4, tree_passes=1, verify_s=0.25, per_position_drafted=[1, 1],
                    per_position_accepted=[1, 0], gammas=[2], finish_reason="eos")
    a.merge(b)
    assert (a.target_passes, a.tree_passes, a.verify_s) == (7, 3, 0.75)
    assert (a.per_position_drafted, a.per_position_accepted, a.gammas) == ([3, 1], [2, 0], [4, 4, 3, 2])
    assert a.finish_reason == "eos"
    numbers = [f.name for f in fields(DecodeStats) if f.type in ("int", "float")]
    ones = DecodeStats(**{n: 1 for n in numbers})
    twice = DecodeStats(**{n: 1 for n in numbers})
    twice.merge(ones)
    assert all(getattr(twice, n) == 2 for n in numbers)
