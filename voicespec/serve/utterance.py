"""One context spoken through the decode worker, for the doors that are not the WebSocket
protocol (the OpenAI endpoint, Wyoming): text in, whole or piece by piece; audio out, in order.

It knows no transport. Sentences reach the worker as they complete (the front end runs on a
thread, once per piece of text, never on the event loop); the worker's items come back through
:meth:`Utterance.items`. Audio waiting in its queue holds a credit, so a reader that stops
reading pauses this utterance only (the worker skips it), as a slow WebSocket client does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

from voicespec.frontend.incremental import complete_prefix
from voicespec.frontend.ssml import Script
from voicespec.frontend.text import TextError
from voicespec.frontend.timestamps import Timestamps
from voicespec.pipeline.synthesis import AudioChunk, SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve.done import done_stats
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import FINISHED, Credits, DecodeWorker, Failed, IncrementalStream, Job


class SynthesisFailed(RuntimeError):
    """The worker could not finish the utterance (a bug, or the device failed)."""


class Utterance:
    """``await add(text)`` any number of times, ``await end()``, and iterate :meth:`items` (the
    three may interleave); :meth:`cancel` stops it within one decode step. ``stats``: the
    ``done`` statistics, once :meth:`items` has ended."""

    def __init__(self, worker: DecodeWorker, metrics: ServerMetrics, voice: Voice, options: SynthesisOptions,
                 queue_chunks: int, pacing_lead_s: float | None = None) -> None:
        self.worker = worker
        self.metrics = metrics
        self.voice = voice
        self.options = options
        self.queue_chunks = queue_chunks
        self.pacing_lead_s = pacing_lead_s
        self.credits = Credits()
        self.job: Job | None = None
        self._items: asyncio.Queue[Any] = asyncio.Queue()
        self._buffer = ""  # text not yet handed to synthesis (no finished sentence yet)
        self._settled = 0  # offset in the buffer before which no sentence end can appear
        self._text_error: str | None = None
        self.ended = False
        self.finished = False  # its last item has been read (done or failed) or it was cancelled
        self.t_ready: float | None = None
        self.t_first_audio: float | None = None
        self.samples = 0
        self.stats: dict[str, Any] | None = None
        self.on_finished: Callable[[Utterance], None] | None = None  # told once, when it is done with
        metrics.contexts_started.inc()
        metrics.active_contexts.inc()

    async def add(self, text: str) -> None:
        """More text; its complete sentences go to synthesis now."""
        if self.ended:
            raise RuntimeError("the utterance has ended")
        buffer = self._buffer + text
        n, self._settled = complete_prefix(buffer, start=self._settled)
        self._buffer = buffer[n:] if n else buffer
        if n:
            await self._speak(buffer[:n])

    async def end(self) -> None:
        """No more text: the rest is spoken. TextError if nothing in the text was speakable."""
        if self.ended:
            return
        self.ended = True
        rest, self._buffer, self._settled = self._buffer, "", 0
        if rest.strip():
            await self._speak(rest)
        if self.job is None:
            self._close("error")
            raise TextError(self._text_error or "the text has nothing to speak")
        self.job.stream.close()
        self._bump()

    async def add_markup(self, text: str, ssml: bool | None = None, lexicon: Mapping[str, str] | None = None) -> None:
        """A whole SSML document (``ssml``; None: when its root is ``<speak>``) or plain text read
        with ``lexicon`` (word -> IPA); TextError (SSMLError) for markup that cannot be read."""
        if self.ended:
            raise RuntimeError("the utterance has ended")
        script = await asyncio.to_thread(self.voice.script, text, ssml=ssml, lexicon=lexicon)
        self._submit(text, script)

    async def _speak(self, text: str) -> None:
        try:
            script = await asyncio.to_thread(self.voice.script, text, ssml=False)
        except TextError as e:  # a piece with nothing speakable (only punctuation, say): the rest may have
            self._text_error = str(e)
            return
        self._submit(text, script)

    def _submit(self, text: str, sentences: Script) -> None:
        if self.finished:  # cancelled while the front end ran
            return
        if self.job is None:
            self.t_ready = time.perf_counter()
            stream = IncrementalStream(self.voice, text, self.options, sentences)
            self.job = Job(stream, self, self, self.credits, self.pacing_lead_s)
            self.worker.add(self.job)
        else:
            self.job.stream.add(sentences)
            self._bump()

    def _bump(self) -> None:
        self.job.input_version += 1
        self.worker.wake()

    def on_item(self, job: Job, item: Any) -> None:
        """From the decode worker, on the event loop (``TTSServer.deliver``)."""
        self._items.put_nowait(item)

    async def items(self) -> AsyncIterator[AudioChunk | Timestamps]:
        """Audio chunks (and timestamps, where asked for) until the end of the utterance;
        SynthesisFailed if the worker failed."""
        while True:
            item = await self._items.get()
            if isinstance(item, AudioChunk):
                full = self.credits.outstanding >= self.queue_chunks
                self.credits.released += 1
                if full:  # the worker may be skipping this utterance: let it look again
                    self.worker.wake()
                self.samples += item.pcm.numel()
                if self.t_first_audio is None and item.pcm.numel():
                    self.t_first_audio = time.perf_counter()
                yield item
            elif isinstance(item, Timestamps):
                yield item
            elif item is FINISHED:
                self.stats = done_stats(self.job, self.samples, self.t_ready, self.t_first_audio, self.metrics)
                self._close(None)
                return
            elif isinstance(item, Failed):
                self._close("error")
                raise SynthesisFailed(f"synthesis failed: {item.error}")

    def cancel(self, reason: str = "cancelled") -> None:
        """Stop now (the client went away, or asked): the worker drops it within one step."""
        if self.finished:
            return
        if self.job is not None:
            self.job.stream.cancel()
            self.worker.wake()
        self._close(reason)

    def _close(self, reason: str | None) -> None:
        """Once: the context leaves the metrics' active count (``reason``: how it ended, when
        not ``done``, which :func:`done_stats` records)."""
        if self.finished:
            return
        self.finished = True
        self.metrics.active_contexts.dec()
        if reason is not None:
            self.metrics.finished(reason)
        if self.on_finished is not None:
            self.on_finished(self)
