"""When each word (and phoneme) is spoken, from the durations the LM is conditioned on.

An aligned target speaks unit ``j`` of a sentence over exactly the frames its duration gives it
(the track fixes the utterance's length, EOS is forced at its end), so these times are exact to
the codec frame, known before the audio is made, and can be sent ahead of it. Pure functions.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from typing import Any


@dataclass(frozen=True)
class Timestamp:
    text: str
    start_s: float  # on the stream's timeline: seconds from its first sample
    end_s: float

    def to_dict(self) -> dict[str, Any]:
        return {"text": self.text, "start_s": round(self.start_s, 6), "end_s": round(self.end_s, 6)}


@dataclass(frozen=True)
class Timestamps:
    """What sentence ``sentence`` of a stream says when."""

    sentence: int
    words: tuple[Timestamp, ...]
    phonemes: tuple[Timestamp, ...]


def spans(labels: Sequence[str], owner: Sequence[int], durations: Sequence[int], frame_s: float,
          offset_frames: int = 0, n_frames: int | None = None) -> tuple[Timestamp, ...]:
    """One timestamp per run of consecutive units with the same ``owner >= 0``, labelled
    ``labels[owner]``, from its first unit's first frame to its last unit's end; ``owner[j] = -1``
    (a word boundary, a break) belongs to no span. ``durations[j]``: frames of unit ``j``.
    ``n_frames``: the frames that will be made (a step cap may cut the utterance short): spans
    past them are dropped, one they cut ends with them."""
    if not len(owner) == len(durations):
        raise ValueError(f"{len(owner)} owners for {len(durations)} durations")
    ends = list(accumulate(durations))
    limit = ends[-1] if ends else 0
    limit = limit if n_frames is None else min(limit, n_frames)
    out: list[Timestamp] = []
    j = 0
    while j < len(owner):
        k = j
        while k + 1 < len(owner) and owner[k + 1] == owner[j]:
            k += 1
        start = ends[j] - durations[j]
        if owner[j] >= 0 and start < limit:
            out.append(Timestamp(labels[owner[j]], (offset_frames + start) * frame_s,
                                 (offset_frames + min(ends[k], limit)) * frame_s))
        j = k + 1
    return tuple(out)


def sentence_timestamps(sentence: int, words: Sequence[str], word_of: Sequence[int], units: Sequence[str],
                        durations: Sequence[int], frame_s: float, offset_frames: int,
                        n_frames: int | None = None) -> Timestamps:
    """Words (``word_of[j]``: unit ``j``'s word, -1 between words) and phonemes (each unit of a
    word on its own; ``units[j]`` its symbol) of one sentence starting at frame ``offset_frames``,
    ``n_frames`` long (default: all its durations)."""
    each = [j if w >= 0 else -1 for j, w in enumerate(word_of)]
    return Timestamps(sentence, spans(words, word_of, durations, frame_s, offset_frames, n_frames),
                      spans(units, each, durations, frame_s, offset_frames, n_frames))
