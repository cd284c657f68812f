"""Playout: a real-time player fed by timed arrivals (underruns, stalls, lead), in totals and as a
timeline, and the two agree."""

from __future__ import annotations

import numpy as np
import pytest

from voicespec.serve.playout import gaps, playout, playout_timeline


def test_playout_counts_underruns_against_real_time():
    sr = 1000
    # 0.1 s chunks every 0.1 s: with 0.2 s prebuffer, playback never starves.
    steady = [(0.1 * i, 100) for i in range(10)]
    p = playout(steady, sr, 0.2)
    assert p["underruns"] == 0 and p["stall_s"] == 0 and p["start_s"] == pytest.approx(0.1)
    assert p["end_s"] == pytest.approx(1.1) and p["audio_s"] == pytest.approx(1.0)
    assert p["min_lead_s"] == pytest.approx(0.1)
    # No prebuffer, a hole after the 3rd chunk: the audio runs out at 0.3 s, the next chunk comes at 0.7 s.
    holey = [(0.0, 100), (0.1, 100), (0.2, 100), (0.7, 100), (0.8, 100)]
    p = playout(holey, sr, 0.0)
    assert p["start_s"] == 0.0 and p["underruns"] == 1 and p["stall_s"] == pytest.approx(0.4)
    assert p["end_s"] == pytest.approx(0.9)
    # A prebuffer that covers the hole removes the underrun.
    assert playout(holey, sr, 0.5)["underruns"] == 0
    # Less audio than the prebuffer: playback starts at the end of the stream.
    p = playout([(0.0, 50), (0.3, 50)], sr, 1.0)
    assert p["start_s"] == 0.3 and p["underruns"] == 0 and p["min_lead_s"] is None
    assert playout([], sr, 0.1)["underruns"] == 0
    assert gaps([0.0, 0.1, 0.35]) == pytest.approx([0.1, 0.25])
    with pytest.raises(ValueError):
        playout(steady, 0, 0.1)


@pytest.mark.parametrize("prebuffer_s", [0.0, 0.05, 0.3, 5.0])
def test_playout_timeline_ends_where_playout_totals_do(prebuffer_s):
    rng, sr = np.random.default_rng(7), 1000
    times = np.cumsum(rng.exponential(0.08, 60))
    arrivals = [(float(t), int(n)) for t, n in zip(times, rng.integers(20, 120, 60))]
    p, points = playout(arrivals, sr, prebuffer_s), playout_timeline(arrivals, sr, prebuffer_s)
    assert [q.t for q in points] == sorted(q.t for q in points) and all(q.t > p["start_s"] for q in points)
    assert sum(q.stalled for q in points) == p["underruns"]
    assert sum(-q.lead_s for q in points if q.stalled) == pytest.approx(p["stall_s"])
    leads = [q.lead_s for q in points if not q.stalled]
    assert min(leads, default=None) == p["min_lead_s"]
    if points:  # the last arrival: the player runs on from it with that lead plus the last chunk
        last = points[-1]
        assert last.t + max(last.lead_s, 0.0) + arrivals[-1][1] / sr == pytest.approx(p["end_s"])
    assert playout_timeline([], sr, 0.1) == []



def test_playout_timeline_agrees_with_playout():
    sr = 1000  # 100 ms chunks; the 4th arrives 100 ms after the player ran dry (at 0.35 s)
    arrivals = [(0.0, 100), (0.05, 100), (0.1, 100), (0.45, 100), (0.5, 100)]
    lead = playout_timeline(arrivals, sr, prebuffer_s=0.2)
    play = playout(arrivals, sr, 0.2)
    assert [p.t for p in lead] == [0.1, 0.45, 0.5]  # playback started at the second arrival
    assert lead[0].lead_s == pytest.approx(0.15) and lead[1].lead_s == pytest.approx(-0.10)
    assert [p.stalled for p in lead] == [False, True, False]
    assert sum(p.stalled for p in lead) == play["underruns"] == 1
    assert -lead[1].lead_s == pytest.approx(play["stall_s"])

