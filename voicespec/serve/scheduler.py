"""The server's synthesis side: text that arrives while it is spoken, and the decode worker.

The model runs on one thread that steps the active contexts round-robin, one audio chunk per
turn, so many sessions interleave at decode-step granularity and a cancel takes effect within one
step. A context is skipped while its connection has too many chunks in flight (a slow reader
slows only itself), while it waits for text, and while it is paced ahead of real time.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from voicespec.pipeline.synthesis import AudioChunk, Step, SynthesisOptions, SynthesisStream
from voicespec.pipeline.voice import Voice

log = logging.getLogger("voicespec.server")


@dataclass(frozen=True)
class FlushMark:
    flush_id: str | int | None


class IncrementalStream(SynthesisStream):
    """A :class:`SynthesisStream` whose text arrives while it runs: it only schedules the stream's
    own loop (:meth:`_next_step`), so streamed and offline synthesis cannot drift apart.

    Sentences are appended with :meth:`add`; the iterator yields ``None`` when it has caught up
    and more text may come (the worker moves on to other contexts), a :class:`FlushMark` when it
    reaches a flush point (the codec and resampler are flushed first, so all audio for the text
    before it has been yielded), and ends after :meth:`close`. Fed the whole text before the
    first step, it yields exactly what :class:`SynthesisStream` yields."""

    def __init__(self, voice: Voice, text: str, options: SynthesisOptions) -> None:
        super().__init__(voice, text, options)
        self._lock = threading.Lock()
        self._flushes: deque[tuple[int, str | int | None]] = deque()  # (after sentence n, id)
        self.closed = False

    def add(self, sentences: list[tuple[str, list[int]]]) -> None:
        with self._lock:
            self.sentences = self.sentences + sentences  # a new list: the worker reads it unlocked

    def mark_flush(self, flush_id: str | int | None) -> None:
        with self._lock:
            self._flushes.append((len(self.sentences), flush_id))

    def close(self) -> None:
        with self._lock:
            self.closed = True

    def _next_step(self, i: int) -> Step | FlushMark:
        with self._lock:  # one look at the sentences, flushes and end, as the event loop left them
            if self._flushes and self._flushes[0][0] <= i:
                return FlushMark(self._flushes.popleft()[1])
            if i < len(self.sentences):
                return Step.SENTENCE
            return Step.END if self.closed and not self._flushes else Step.WAIT


class Credits:
    """Audio chunks produced (written by the worker) and released (written by the event loop)."""

    def __init__(self) -> None:
        self.produced = 0
        self.released = 0

    @property
    def outstanding(self) -> int:
        return self.produced - self.released


@dataclass(eq=False)
class Job:
    """One context's synthesis as the decode worker sees it."""

    stream: IncrementalStream
    ctx: Any  # the server's per-context and per-connection state, passed back with each item
    session: Any
    credits: Credits
    pacing_lead_s: float | None
    input_version: int = 0  # bumped by the event loop when text, a flush or the end arrives
    starved_at: int = -1  # the input_version at which the stream last had nothing to do
    finished: bool = False
    busy_s: float = 0.0  # worker time spent on this job
    audio_s: float = 0.0
    t_first_audio: float | None = None
    it: Iterator[Any] | None = None


class _Finished:
    pass


@dataclass(frozen=True)
class Failed:
    error: BaseException


FINISHED = _Finished()


class DecodeWorker:
    """The one thread that runs the model: round-robin over runnable jobs, one chunk per turn."""

    def __init__(self, queue_limit: int, deliver: Callable[[Job, Any], None]) -> None:
        self.queue_limit = queue_limit
        self.deliver = deliver
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="voicespec-decode", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=10)

    def add(self, job: Job) -> None:
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _pick(self, now: float) -> tuple[Job | None, float | None]:
        """The next runnable job (moved to the back of the line), else how long to wait."""
        wait = None
        for _ in range(len(self._jobs)):
            job = self._jobs.popleft()
            if job.finished or job.stream.cancelled:
                if job.it is not None:
                    job.it.close()  # frees the KV caches now, on this thread
                continue
            self._jobs.append(job)
            if job.starved_at == job.input_version or job.credits.outstanding >= self.queue_limit:
                continue
            if job.pacing_lead_s is not None and job.t_first_audio is not None:
                ahead = job.audio_s - (now - job.t_first_audio) - job.pacing_lead_s
                if ahead > 0:
                    wait = ahead if wait is None else min(wait, ahead)
                    continue
            return job, None
        return None, wait

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    job, wait = self._pick(time.perf_counter())
                    if job is not None:
                        version = job.input_version
                        break
                    self._cond.wait(wait)
            t = time.perf_counter()
            try:
                if job.it is None:
                    job.it = iter(job.stream)
                item = next(job.it)
            except StopIteration:
                item = FINISHED
            except Exception as e:  # a bug or a resource problem: end this context, keep serving
                log.exception("synthesis failed")
                item = Failed(e)
            now = time.perf_counter()
            job.busy_s += now - t
            if item is None:
                job.starved_at = version
                continue
            if isinstance(item, AudioChunk):
                job.credits.produced += 1
                job.t_first_audio = job.t_first_audio or now
                job.audio_s += item.pcm.numel() / job.stream.stats.sample_rate
            elif item is FINISHED or isinstance(item, Failed):
                job.finished = True
            self.deliver(job, item)
