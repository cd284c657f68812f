"""Frames handled in blocks that grow: small first (fast first audio), then larger, so that a call's
fixed cost is shared by more frames once the listener has audio in hand.

On a CPU the codec's streaming decoder and the fine stage cost mostly their weight reads per call,
not per frame (2-core EPYC, one thread: the shipped codec 1.80 ms a frame in blocks of 2, 0.97 in
blocks of 4, 0.58 in blocks of 8). Their per-call cost is what a single stream pays 50 times a
second. Sizes depend on the frame's place in the utterance only, never on timing, so the audio of a
seed stays the same whatever γ, batch or machine load did to when frames arrived.

Pure arithmetic, standard library only: the codec's stream decodes in these blocks
(:class:`~voicespec.codec.stream.CodecStream`) and the engine completes fine codes at their ends
(:class:`~voicespec.engine.decoder.SpecDecoder`), so the two line up.
"""

from __future__ import annotations

from dataclasses import dataclass

from voicespec.checks import is_int


@dataclass(frozen=True)
class FrameBlocks:
    """Block ``i`` holds ``min(most, first * 2**i)`` frames: ``FrameBlocks(2, 8)`` is 2, 4, 8, 8, ...
    (ends 2, 6, 14, 22, ...); ``most`` None (or equal to ``first``) keeps every block at ``first``."""

    first: int = 1
    most: int | None = None

    def __post_init__(self) -> None:
        if not (is_int(self.first) and self.first >= 1):
            raise ValueError(f"a block's first size must be an integer >= 1, got {self.first!r}")
        if self.most is not None and not (is_int(self.most) and self.most >= self.first):
            raise ValueError(f"a block's largest size must be an integer >= its first size {self.first}, got {self.most!r}")

    @property
    def largest(self) -> int:
        return self.first if self.most is None else self.most

    def size(self, i: int) -> int:
        """Frames in block ``i`` (0-based)."""
        return min(self.largest, self.first << min(i, self.largest.bit_length()))

    def next_end(self, frames: int) -> int:
        """The first block end past ``frames`` frames (ends are the running sums of the sizes)."""
        end, i = 0, 0
        while self.size(i) < self.largest:  # the doubling ramp: a handful of blocks
            end += self.size(i)
            if end > frames:
                return end
            i += 1
        return end + ((frames - end) // self.largest + 1) * self.largest
