"""One context's text on its way to the decode worker, whatever door it came through (the
WebSocket protocol, the OpenAI endpoint, Wyoming): the session core the doors share.

Text comes whole or piece by piece; each complete sentence goes through the front end once, in a
process of its own (:mod:`~voicespec.serve.text_reader`: its cost grows with the text, and neither
the event loop every connection shares nor the decode thread waits for it), and on to the
context's stream, created with its first speakable text. How the worker's items
leave (an outgoing WebSocket queue, an iterator for HTTP and Wyoming) is the door's:
:meth:`Context.on_item`.
"""

from __future__ import annotations

import time
import unicodedata
from collections.abc import Callable, Mapping
from typing import Any

from voicespec.frontend.incremental import complete_prefix
from voicespec.frontend.lexicon import LexiconError
from voicespec.frontend.ssml import SSMLError
from voicespec.frontend.text import TextError
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve.done import done_stats
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import Credits, DecodeWorker, IncrementalStream, Job
from voicespec.serve.text_reader import TextReader


class TextTooLong(TextError):
    """More text without a sentence end than the front end reads at once."""


class Context:
    """``await add(text)`` any number of times (``add_markup`` for a whole SSML document,
    ``flush`` to speak what is buffered), then ``await end()``; :meth:`cancel` stops it within
    one decode step. ``owner.on_item(job, item)`` receives the worker's items (default: this
    context's own :meth:`on_item`); ``credits``: the audio credits its chunks hold (a WebSocket
    connection's contexts share one). ``on_finished`` is told once, when it is done with."""

    def __init__(self, worker: DecodeWorker, metrics: ServerMetrics, voice: Voice, options: SynthesisOptions, *,
                 credits: Credits | None = None, owner: Any = None, lexicon: Mapping[str, str] | None = None,
                 pacing_lead_s: float | None = None, text_reader: TextReader | None = None) -> None:
        self.worker = worker
        self.text_reader = text_reader if text_reader is not None else TextReader(0)
        self.metrics = metrics
        self.voice = voice
        self.options = options
        self.credits = credits if credits is not None else Credits()
        self.owner = owner if owner is not None else self
        self.lexicon = lexicon  # word -> IPA, for every piece of its text
        self.pacing_lead_s = pacing_lead_s
        self.job: Job | None = None
        self.buffer = ""  # text not yet handed to synthesis (no finished sentence yet)
        self._settled = 0  # offset in the buffer before which no sentence end can appear (complete_prefix)
        self.text_error: str | None = None  # why its last unspeakable piece was refused
        self.ended = False
        self.cancelled = False  # cancelled, disconnected or failed: nothing more of it goes out
        self.finished = False  # done with: its end was delivered, or it was cancelled or failed
        self.t_ready: float | None = None  # when its first text was handed to synthesis
        self.t_first_audio: float | None = None  # when its first audio went out (set by the door)
        self.samples = 0  # audio samples gone out (counted by the door)
        self.on_finished: Callable[[Context], None] | None = None
        metrics.contexts_started.inc()
        metrics.active_contexts.inc()

    def _check_fits(self, text: str) -> None:
        """TextTooLong for more text than the front end reads at once, checked before anything of
        it is buffered or spoken."""
        limit = self.voice.frontend.max_chars
        if len(unicodedata.normalize("NFKC", text)) > limit:
            raise TextTooLong(f"text rejected: over {limit} characters without a sentence end; end sentences "
                              "with punctuation, or flush")

    async def add(self, text: str) -> None:
        """More text; its complete sentences go to synthesis now."""
        self._check_open()
        self._check_fits(self.buffer + text)
        buffer = self.buffer + text
        n, self._settled = complete_prefix(buffer, start=self._settled)
        self.buffer = buffer[n:] if n else buffer
        if n:
            await self._speak(buffer[:n])

    async def add_markup(self, text: str, ssml: bool | None = None, lexicon: Mapping[str, str] | None = None) -> None:
        """A whole SSML document (``ssml``; None: when its root is ``<speak>``), or plain text read
        with ``lexicon`` (word -> IPA; default: the context's), after the text buffered before it;
        SSMLError or LexiconError for markup or pronunciations that cannot be read."""
        self._check_open()
        self._check_fits(text)
        await self.release()
        await self._speak(text, ssml, lexicon)

    async def release(self) -> None:
        """Speak what is buffered, sentence end or not."""
        text, self.buffer, self._settled = self.buffer, "", 0
        if text.strip():
            await self._speak(text)

    async def flush(self, flush_id: Any) -> bool:
        """Speak what is buffered and mark the point in the stream (``FlushMark`` comes back when
        the audio before it has been made); False if nothing was ever spoken (no mark is set)."""
        if not self.ended:
            await self.release()
        if self.job is None:
            return False
        self.job.stream.mark_flush(flush_id)
        self._bump()
        return True

    async def end(self) -> None:
        """No more text: the rest is spoken. TextError if nothing in the text was speakable (the
        context is then finished), or if the rest could not be read (what came before still ends)."""
        if self.ended:
            return
        self.ended = True
        error: TextError | None = None
        try:
            await self.release()
        except TextError as e:  # the last piece's pronunciations: said, and what came before still ends
            error = e
        if self.job is None:
            self.close("error")
            raise error or TextError(self.text_error or "the text has nothing to speak")
        self.job.stream.close()
        self._bump()
        if error is not None:
            raise error

    def _check_open(self) -> None:
        if self.ended:
            raise RuntimeError("the context has ended")

    async def _speak(self, text: str, ssml: bool | None = False, lexicon: Mapping[str, str] | None = None) -> None:
        lexicon = lexicon if lexicon is not None else self.lexicon
        try:
            script = await self.text_reader.read(self.voice, text, ssml, lexicon, self.options)
        except (SSMLError, LexiconError):  # the client's markup or pronunciations: said, not skipped
            raise
        except TextError as e:  # a piece with nothing speakable (only punctuation, say): the rest may have
            self.text_error = str(e)
            return
        if self.finished:  # cancelled while the front end ran
            return
        if self.job is None:
            self.t_ready = time.perf_counter()
            stream = IncrementalStream(self.voice, text, self.options, script)
            self.job = Job(stream, self, self.owner, self.credits, self.pacing_lead_s)
            self.worker.add(self.job)
        else:
            self.job.stream.add(script)
            self._bump()

    def _bump(self) -> None:
        self.job.input_version += 1
        self.worker.wake()

    def on_item(self, job: Job, item: Any) -> None:
        """From the decode worker, on the event loop (``TTSServer.deliver``): the door's to send."""
        raise NotImplementedError

    def done_stats(self) -> dict[str, Any]:
        """The ``done`` statistics (counts the context as done in the metrics)."""
        return done_stats(self.job, self.samples, self.t_ready, self.t_first_audio, self.metrics)

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop now (the client went away or asked, or synthesis failed): the worker drops it
        within one step. A no-op once it has finished."""
        if self.finished:
            return
        self.cancelled = True
        if self.job is not None:
            self.job.stream.cancel()
            self.worker.wake()
        self.close(reason)

    def close(self, reason: str | None) -> None:
        """Once: the context leaves the metrics' active count (``reason``: how it ended, when not
        ``done``, which :meth:`done_stats` records)."""
        if self.finished:
            return
        self.finished = True
        self.metrics.active_contexts.dec()
        if reason is not None:
            self.metrics.finished(reason)
        if self.on_finished is not None:
            self.on_finished(self)
