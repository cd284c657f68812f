"""The Python API: ``voicespec.Voice`` is a voice that also speaks.

It adds :meth:`Voice.say` and :meth:`Voice.stream` to :class:`voicespec.pipeline.voice.Voice`
(which loads and checks the folder, and knows nothing of synthesis); everything that takes a voice
takes this one.

Text of any length: the front end takes at most ``frontend.max_chars`` characters at a time (the
limit of one protocol message), so :class:`LongTextStream` hands it the text a piece at a time,
each cut where a sentence ends, as the sentences before are spoken.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Iterator, Mapping
from typing import Any

from voicespec.engine.config import DecodeConfig
from voicespec.frontend.incremental import complete_prefix
from voicespec.frontend.text import FrontEnd, TextError, sanitize
from voicespec.pipeline import voice as _voice
from voicespec.pipeline.synthesis import (Audio, SynthesisOptions, SynthesisStream, Synthesizer, collect,
                                          request_options)

_LAST_SPACE = re.compile(r".*\s", re.S)  # greedy: up to and including the last whitespace


def _fits(piece: str, limit: int) -> bool:
    """Whether the front end takes ``piece`` whole: ``limit`` characters, also after NFKC (which
    the front end applies, and which can expand a character up to 18-fold)."""
    return len(piece) <= limit and len(unicodedata.normalize("NFKC", piece)) <= limit


def _cut(window: str, whole_words: bool) -> int:
    """Where to end a piece that starts ``window``: after its last finished sentence (where the
    front end would split the whole text), else after its last whitespace, else at its end.
    ``whole_words``: the window ends between words (else its last word runs on past it)."""
    space = _LAST_SPACE.match(window)
    words = window if whole_words or space is None else window[:space.end()]
    n, _ = complete_prefix(words)
    return n or (space.end() if space is not None else len(window))


def _next_piece(text: str, start: int, limit: int) -> str:
    """The piece of ``text`` from ``start`` on: as long as fits, cut by :func:`_cut`."""
    window = limit
    while True:
        end = start + window
        piece = text[start:end]
        if end < len(text):
            piece = piece[:_cut(piece, whole_words=text[end].isspace())]
        if _fits(piece, limit) or len(piece) <= 1:
            return piece
        window = len(piece) // 2  # NFKC made it too long: look again in less text


def text_pieces(text: str, limit: int) -> Iterator[str]:
    """``text`` as consecutive pieces the front end takes whole (:func:`_fits`), cut at sentence
    ends where there are any; a text that fits is one piece. Lazy: a chapter is never normalized
    all at once."""
    start = 0
    while start < len(text):
        piece = _next_piece(text, start, limit)
        start += len(piece)
        yield piece


def _check_characters(frontend: FrontEnd, piece: str) -> None:
    """Raise what is wrong with a piece's characters themselves (a lone surrogate, ...); a piece
    that merely has nothing speakable passes (the rest of the text may have)."""
    if piece.strip():
        sanitize(piece, frontend.max_chars)


def _piece_sentences(frontend: FrontEnd, piece: str) -> list[tuple[str, list[int]]]:
    """A piece's sentences: none where it has nothing speakable; an error in the text itself is raised."""
    try:
        return frontend.sentences(piece)
    except TextError:
        _check_characters(frontend, piece)
        return []


class LongTextStream(SynthesisStream):
    """A :class:`SynthesisStream` of text of any length: the front end runs a piece at a time (its
    work and memory bounded by one piece), the next only once every sentence before it is decoded. Sentences are
    numbered (and seeded) across pieces, through one waveform; a text that fits the front end
    is synthesized exactly as :class:`SynthesisStream` would."""

    def __init__(self, voice: _voice.Voice, text: str, options: SynthesisOptions) -> None:
        t0 = time.perf_counter()
        frontend = voice.frontend
        self._pieces = text_pieces(text, frontend.max_chars) if isinstance(text, str) else iter(())
        super().__init__(voice, text, options, self._first_sentences(frontend, text))
        self._t0 = t0  # the first piece's front end counts towards TTFA and wall time, as it would whole
        self.stats.frontend_s = time.perf_counter() - t0

    def _first_sentences(self, frontend: FrontEnd, text: str) -> list[tuple[str, list[int]]]:
        """The sentences of the first piece that has any; else the front end's error for the
        first piece, before any work (a text that fits: exactly the front end's own error)."""
        first_error: TextError | None = None
        for piece in self._pieces:
            try:
                return frontend.sentences(piece)
            except TextError as e:
                first_error = first_error or e
                _check_characters(frontend, piece)
        if first_error is not None:
            raise first_error
        return frontend.sentences(text)  # no pieces: empty, or not a string: the front end says so

    def _next_step(self, i: int) -> Any:
        """Run the front end on the next pieces once the sentences so far are decoded."""
        while i >= len(self.sentences):
            piece = next(self._pieces, None)
            if piece is None:
                break
            t = time.perf_counter()
            self.sentences.extend(_piece_sentences(self.voice.frontend, piece))
            self.stats.frontend_s += time.perf_counter() - t
        return super()._next_step(i)


class LongTextSynthesizer(Synthesizer):
    """A :class:`Synthesizer` that takes text of any length (:class:`LongTextStream`)."""

    def stream(self, text: str, options: SynthesisOptions | None = None) -> SynthesisStream:
        return LongTextStream(self.voice, text, options or SynthesisOptions(DecodeConfig(self.voice.sampling)))


class Voice(_voice.Voice):
    """``Voice.from_pretrained("voicespec-tiny-g2" | folder)``, then ``say`` or ``stream``."""

    def say(self, text: str | None = None, *, ssml: str | None = None, lexicon: Mapping[str, str] | None = None,
            **options: Any) -> Audio:
        """Synthesize ``text`` whole (any length), or an SSML document (``ssml``): an
        :class:`~voicespec.pipeline.synthesis.Audio` (samples, rate, word timestamps, stats;
        ``.save(path)``). ``lexicon``: pronunciations, word -> IPA. Options: ``seed``, ``speed``,
        ``drafter``, ``gamma``, ``tree``, ``sample_rate``, ``max_steps`` and the sampling fields
        (``temperature``, ``top_k``, ...): :func:`~voicespec.pipeline.synthesis.request_options`."""
        return collect(self.stream(text, ssml=ssml, lexicon=lexicon, **options))

    def stream(self, text: str | None = None, *, ssml: str | None = None, lexicon: Mapping[str, str] | None = None,
               **options: Any) -> SynthesisStream:
        """Synthesize ``text`` (any length: the front end takes a chapter a piece at a time, as it
        is spoken) or ``ssml`` as it is made: iterate for :class:`~voicespec.pipeline.synthesis.AudioChunk` s
        (``.pcm``, float32 at ``stream.stats.sample_rate``); the same options as :meth:`say`."""
        if (text is None) == (ssml is None):
            raise TypeError("give the text to speak, or an SSML document as ssml=, not both")
        request = request_options(self, **options)
        if ssml is not None or lexicon:
            source = ssml if ssml is not None else text
            return SynthesisStream(self, source, request, self.script(source, ssml=ssml is not None, lexicon=lexicon))
        return LongTextStream(self, text, request)
