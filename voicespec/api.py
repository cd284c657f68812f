"""The Python API: ``voicespec.Voice`` is a voice that also speaks.

It adds :meth:`Voice.say` and :meth:`Voice.stream` to :class:`voicespec.pipeline.voice.Voice`
(which loads and checks the folder, and knows nothing of synthesis); everything that takes a voice
takes this one.
"""

from __future__ import annotations

from typing import Any

from voicespec.pipeline import voice as _voice
from voicespec.pipeline.synthesis import Audio, SynthesisStream, collect, request_options


class Voice(_voice.Voice):
    """``Voice.from_pretrained("voicespec-tiny" | folder)``, then ``say`` or ``stream``."""

    def say(self, text: str, **options: Any) -> Audio:
        """Synthesize ``text`` whole: an :class:`~voicespec.pipeline.synthesis.Audio` (samples,
        rate, word timestamps, stats; ``.save(path)``). Options: ``seed``, ``speed``, ``drafter``,
        ``gamma``, ``tree``, ``sample_rate``, ``max_steps`` and the sampling fields
        (``temperature``, ``top_k``, ...): :func:`~voicespec.pipeline.synthesis.request_options`."""
        return collect(self.stream(text, **options))

    def stream(self, text: str, **options: Any) -> SynthesisStream:
        """Synthesize ``text`` as it is made: iterate for
        :class:`~voicespec.pipeline.synthesis.AudioChunk` s (``.pcm``, float32 at
        ``stream.stats.sample_rate``); the same options as :meth:`say`."""
        return SynthesisStream(self, text, request_options(self, **options))
