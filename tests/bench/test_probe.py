"""The outside probe's pure parts: every level's sentences are new, and the clean count."""

from __future__ import annotations

import random

from voicespec.bench.listeners import LoadLevel
from voicespec.bench.probe import fresh_texts, largest_clean


def test_fresh_texts_never_repeat_a_sentence_and_follow_the_seed():
    seen: set[str] = set()
    texts = [fresh_texts(n, random.Random(7), seen) for n in (8, 16, 32)]  # the same seed three times
    sentences = [s for level in texts for t in level for s in t.split(". ")]
    assert [len(level) for level in texts] == [8, 16, 32] and len(sentences) == 2 * 56
    assert len(set(s.rstrip(".") for s in sentences)) == len(sentences) == len(seen)
    assert fresh_texts(8, random.Random(7), set()) == texts[0]


def _level(clients: int, underruns: int = 0, errors: int = 0) -> LoadLevel:
    return LoadLevel("default", clients, {"p50": 1.0, "p95": 1.0, "p99": 1.0}, underruns, underruns, 0.0, None,
                     {"p50": None, "p95": None, "p99": None}, ["e"] * errors)


def test_largest_clean_stops_at_the_first_level_with_an_underrun_or_error():
    assert largest_clean([_level(8), _level(16), _level(24)]) == 24
    assert largest_clean([_level(16), _level(8), _level(24, underruns=1), _level(32)]) == 16
    assert largest_clean([_level(8, errors=1), _level(16)]) == 0 and largest_clean([]) == 0
