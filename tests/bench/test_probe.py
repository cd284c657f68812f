"""The outside probe's pure parts: every level's sentences are new, and the clean count."""

from __future__ import annotations

import random

from voicespec.bench.listeners import LoadLevel
from voicespec.bench.budget import capacity
from voicespec.bench.probe import fresh_texts


def test_fresh_texts_never_repeat_a_sentence_and_follow_the_seed():
    seen: set[str] = set()
    texts = [fresh_texts(n, random.Random(7), seen) for n in (8, 16, 32)]  # the same seed three times
    sentences = [s for level in texts for t in level for s in t.split(". ")]
    assert [len(level) for level in texts] == [8, 16, 32] and len(sentences) == 2 * 56
    assert len(set(s.rstrip(".") for s in sentences)) == len(sentences) == len(seen)
    assert fresh_texts(8, random.Random(7), set()) == texts[0]


def _level(clients: int, underruns: int = 0, errors: int = 0, ttfa_p95_ms: float = 1.0) -> dict:
    return LoadLevel("default", clients, {"p50": 1.0, "p95": ttfa_p95_ms, "p99": ttfa_p95_ms}, underruns, underruns,
                     0.0, None, {"p50": None, "p95": None, "p99": None}, ["e"] * errors).to_dict()


def test_largest_clean_stops_at_the_first_level_with_an_underrun_an_error_or_late_first_audio():
    """The probe's clean count (``run_probe``'s ``largest_clean``) read from its levels as it
    records them; with a budget, a level whose newcomers waited past it is not clean."""
    assert capacity([_level(8), _level(16), _level(24)], None) == 24
    assert capacity([_level(16), _level(8), _level(24, underruns=1), _level(32)], None) == 16
    assert capacity([_level(8, errors=1), _level(16)], None) == 0 and capacity([], None) == 0
    waited = [_level(8, ttfa_p95_ms=250.0), _level(16, ttfa_p95_ms=5000.0)]  # held newcomers: clean but late
    assert capacity(waited, None) == 16 and capacity(waited, 300.0) == 8
