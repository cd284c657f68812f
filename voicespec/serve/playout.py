"""A real-time listener, simulated: whether audio arriving as ``(t_seconds, n_samples)`` chunks
would play gap-free after a given prebuffer, and how far ahead of the player it stayed.

Benchmarks and the client judge streaming by this one model, the way a listener would hear it,
rather than by raw chunk gaps. Pure Python with no dependency on the server, so the client can
use it without an import cycle.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple


class LeadPoint(NamedTuple):
    """The player as a chunk arrives (after playback started)."""

    t: float  # arrival, seconds
    lead_s: float  # audio buffered ahead of the player; < 0 when stalled: how long it had been dry
    stalled: bool  # an underrun: the buffer ran dry before this chunk came


def _simulate(arrivals: Sequence[tuple[float, int]], sample_rate: int,
              prebuffer_s: float) -> tuple[float | None, float | None, float, list[LeadPoint]]:
    """One pass of the player: playback start and end, audio seconds, and the lead at each arrival."""
    if sample_rate <= 0 or prebuffer_s < 0:
        raise ValueError("sample_rate must be > 0 and prebuffer_s >= 0")
    chunks = sorted((t, n) for t, n in arrivals if n > 0)
    audio_s = sum(n for _, n in chunks) / sample_rate
    if not chunks:
        return None, None, audio_s, []
    buffered, k = 0.0, 0
    for k, (t, n) in enumerate(chunks):
        buffered += n / sample_rate
        if buffered >= prebuffer_s - 1e-12:
            break
    start = chunks[k][0]
    deadline = start + buffered  # when playback runs dry if nothing more arrives
    points = []
    for t, n in chunks[k + 1:]:
        stalled = t > deadline + 1e-9  # (the tolerance absorbs float rounding of the running sum)
        points.append(LeadPoint(t, deadline - t if stalled else max(0.0, deadline - t), stalled))
        if stalled:
            deadline = t
        deadline += n / sample_rate
    return start, deadline, audio_s, points


def playout(arrivals: Sequence[tuple[float, int]], sample_rate: int, prebuffer_s: float) -> dict[str, Any]:
    """Simulate real-time playback of audio arriving as ``(t_seconds, n_samples)`` chunks.

    Playback starts once ``prebuffer_s`` of audio has arrived (or the stream has ended), then
    consumes audio in real time. When the buffer runs dry before the next chunk arrives, that is
    an underrun: playback stalls until the chunk arrives and resumes at once (as a player that
    plays whatever it has). Returns the playback start, underruns, total stall, the smallest lead
    (buffered audio when a chunk arrived, after the start), and when playback ends.
    :func:`playout_timeline` gives the same run arrival by arrival."""
    start, end, audio_s, points = _simulate(arrivals, sample_rate, prebuffer_s)
    stalls = [-p.lead_s for p in points if p.stalled]
    leads = [p.lead_s for p in points if not p.stalled]
    return {"start_s": start, "end_s": end, "audio_s": audio_s, "underruns": len(stalls), "stall_s": sum(stalls, 0.0),
            "min_lead_s": min(leads, default=None)}


def playout_timeline(arrivals: Sequence[tuple[float, int]], sample_rate: int, prebuffer_s: float) -> list[LeadPoint]:
    """The player of :func:`playout` at each arrival after playback started, in one pass: its lead
    (when the audio received so far would run out, minus now) and whether it had stalled."""
    return _simulate(arrivals, sample_rate, prebuffer_s)[3]


def gaps(times: Sequence[float]) -> list[float]:
    """Seconds between consecutive arrivals."""
    return [b - a for a, b in zip(times, times[1:])]
