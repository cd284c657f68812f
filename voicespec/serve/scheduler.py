"""The server's synthesis side: text that arrives while it is spoken, and the decode worker.

The model runs on one thread in *ticks*: each tick advances every runnable context by one decode
step, and the target passes of all of them run as one batched forward (continuous batching: a
context joins the batch the tick after it starts and leaves it the tick it ends or is cancelled,
giving its cache row back). A context sits out a tick while its connection has too many chunks in
flight (a slow reader slows only itself), while it waits for text, and while it is paced ahead of
real time. Each context's tokens are what it would decode alone: its code is the same coroutine
(:meth:`SynthesisStream.run`), only who shares its forward changes.
"""

from __future__ import annotations

import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from voicespec.engine.step_lm import Pass, Prefill
from voicespec.engine.work import DEFERRED, Work, run_works
from voicespec.frontend.ssml import Script
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

    def __init__(self, voice: Voice, text: str, options: SynthesisOptions,
                 sentences: list[tuple[str, list[int]]] | None = None) -> None:
        super().__init__(voice, text, options, sentences)
        self._lock = threading.Lock()
        self._flushes: deque[tuple[int, str | int | None]] = deque()  # (after sentence n, id)
        self.closed = False

    def add(self, sentences: list[tuple[str, list[int]]] | Script) -> None:
        """More sentences, or a marked-up text's :class:`Script` (its silences, rates and
        pronunciations placed after the sentences so far)."""
        with self._lock:
            if isinstance(sentences, Script):
                self._check_script(sentences)
                n, script = len(self.sentences), sentences
                for own, theirs in ((self.script.pauses, script.pauses), (self.script.speeds, script.speeds),
                                    (self.script.lexicons, script.lexicons)):
                    own.update({n + i: v for i, v in theirs.items()})
                self.script.spoken.update(script.spoken)
                sentences = script.sentences
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
    busy_s: float = 0.0  # worker time spent on this job (its share of batched calls included)
    audio_s: float = 0.0
    t_first_audio: float | None = None
    it: Generator[Any, Any, None] | None = None
    work: Work | None = None  # the call it is parked at, waiting for the next batch
    failed: bool = False
    last_tick: int = -1  # the tick it last stepped in (fair_share: among equal slack, the least recent first)
    play_end: float | None = None  # when its client's audio runs out, played in real time from each chunk's arrival
    t_waiting: float = field(default_factory=time.perf_counter)  # since when it has had text and no audio for it
    idle: bool = False  # it ran out of text; t_waiting restarts when more comes
    let_in: bool = False  # past the decoding limit's hold (hold_newcomers) once: it holds a place from then on

    def slack_s(self, now: float) -> float:
        """How far its client's audio runs ahead of real time (s); negative: it has run dry that
        long, or a newcomer (or text after a pause) has waited that long for audio. A newcomer's
        wait and a stream's underrun count alike; a pause in the text counts as neither."""
        return max(self.t_waiting, self.play_end if self.play_end is not None else -math.inf) - now

    @property
    def waiting(self) -> bool:
        """It waits for its first audio, or for audio for text after a pause (its slack is a wait)."""
        return self.play_end is None or self.t_waiting >= self.play_end

    @property
    def admitting(self) -> bool:
        """A waiting job whose next call is known to be a prefill: a new one, or one parked at it."""
        return self.waiting and (self.it is None or isinstance(self.work, Prefill))

    @property
    def starting(self) -> bool:
        """Admitting, and never let in: a context's first words, not a stream's next sentence or
        its text after a pause, nor a newcomer let in but parked at its prefill for a tick (a
        prefill budget, a tick's cap): its first audio may be on its way already."""
        return self.admitting and not self.let_in


class _Finished:
    pass


class AtCapacity(RuntimeError):
    """The server is full: a request, session or context it turned away (try again later)."""


def places_full(limit: int, waiting: int) -> str:
    """What a client turned away by the decoding limit is told."""
    return f"the server is at capacity (decoding places in use: {limit} of {limit}, waiting: {waiting}); try again later"


class Admission(NamedTuple):
    """What :func:`hold_newcomers` decided for one look at the ready jobs."""

    jobs: list[Job]  # the ready jobs that go on: every one but the waiting and the refused newcomers
    waiting: int  # newcomers held for a place
    free: int | None  # places left once the others start (None: no limit)
    refused: list[Job]  # newcomers past the waiting limit: turned away (the newest)


@dataclass(frozen=True)
class Failed:
    error: BaseException


FINISHED = _Finished()


def fair_share(ready: list[Job], cap: int | None, now: float | None = None, admissions: int | None = None) -> list[Job]:
    """The jobs one tick steps: all of ``ready``, or, past ``cap``, ``cap`` of them shared round
    robin between connections (one context of each per round), least slack first
    (:meth:`Job.slack_s`: the stream nearest to running dry, a newcomer waiting for its first
    audio), then least recently stepped, with at most ``admissions`` of them about to prefill
    to start their audio (:attr:`Job.admitting`; the others are passed over and their places go
    to the next, see :func:`admit`). A tick's cost grows with the contexts in it, so without the
    rounds a connection with many contexts slowed every neighbour's audio by its own count
    (issue 39: 12 sockets x 8 contexts left a one-context neighbour at TTFA 4.8 s); without the
    slack order a burst of newcomers shares the ticks evenly and every one of them waits for the
    whole burst (50 at once: TTFA 1.1 s each), where serving them one after another gives most
    of them their first audio sooner. Which newcomers go first is :func:`newest_first`'s."""
    if cap is None or len(ready) <= cap:
        return ready
    now = time.perf_counter() if now is None else now
    queues: dict[int, deque[Job]] = {}
    slack = newest_first(ready, now)
    for job in sorted(ready, key=lambda j: (slack[id(j)], j.last_tick)):
        queues.setdefault(id(job.session), deque()).append(job)
    rounds, chosen = list(queues.values()), []  # connections in the order of their most urgent context
    left = math.inf if admissions is None else admissions
    while len(chosen) < cap and any(rounds):
        for q in rounds:
            if q and len(chosen) < cap:
                job = q.popleft()
                if job.admitting:
                    if left <= 0:
                        continue
                    left -= 1
                chosen.append(job)
    return chosen


def newest_first(ready: list[Job], now: float) -> dict[int, float]:
    """Each job's place in a saturated tick's order (by ``id``): its slack, except that the
    newcomers (jobs waiting for their first audio, or for audio for text after a pause) trade
    places so the newest takes the most urgent one. How many newcomers go ahead of each stream
    is what their waits give (first come, first served); which newcomers is last come, first
    served: adaptive LIFO ("Fail at Scale", Maurer, ACM Queue 2015). Only a backlog reaches this
    (under its cap a tick serves everyone), and there the oldest waiters are the likeliest to have
    left (a disconnect storm's burst of 50 had held a new session's first audio for the whole
    burst: 0.4-1.0 s against 45 ms quiet), while serving the newest first keeps some first audio
    fast instead of making all of it late. A waiter is never dropped: it is served as the backlog
    clears, and the server's session limits bound how many wait."""
    slack = {id(j): j.slack_s(now) for j in ready}
    waiting = [j for j in ready if j.waiting]
    places = sorted(slack[id(j)] for j in waiting)  # most urgent (longest wait) first
    for job, place in zip(sorted(waiting, key=lambda j: -j.t_waiting), places):
        slack[id(job)] = place
    return slack


def admit(batch: list[Job], budget: int | None, now: float) -> tuple[list[Job], int | None]:
    """``batch`` less the prefills that would start a waiting job's audio (:attr:`Job.admitting`)
    past the first ``budget`` of them (in :func:`newest_first`'s order), and the budget left.
    The worker asks, with ``--max-tick-prefill`` for the whole tick, only while it has a backlog
    (more contexts ready than a tick steps). A prefill costs 7-9 ms a prompt here (16 prompts of
    up to 64 positions at once: 133 ms on 2026-12-06, against a 20 ms frame), so under a backlog
    a tick that prefilled its 16 newest newcomers at once held the newest one's first audio for
    all of them (a disconnect storm: p50 107-152 ms against 27 ms quiet; one prompt a tick:
    69-101 ms). Without a backlog one padded pass starts everyone soonest (8 clients at once:
    TTFA p95 245 ms, against about 500 ms a prompt or two a tick). A playing stream's next
    sentence is never held back (its client is listening). The jobs left out stay parked at
    their :class:`Prefill` and start on the ticks after (nothing of theirs has run: their tokens
    do not change)."""
    if budget is None:
        return batch, None
    starting = [j for j in batch if j.admitting]
    if len(starting) <= budget:
        return batch, budget - len(starting)
    place = newest_first(starting, now)
    taken = {id(j) for j in sorted(starting, key=lambda j: place[id(j)])[:budget]}
    return [j for j in batch if id(j) in taken or not j.admitting], 0


WAIT_PER_CONTEXT_S = 1.0  # hold_newcomers: a context under way on its connection counts as this much less wait


def hold_newcomers(ready: list[Job], jobs: list[Job], limit: int | None, now: float,
                   max_waiting: int | None = None) -> Admission:
    """``ready`` less the newcomers past ``limit`` contexts under way, how many wait, the places
    left once the others start (None: no limit), and the newcomers turned away: past
    ``max_waiting`` waiting, the last in the order below (a bounded queue drops its tail). A
    newcomer (:attr:`Job.starting`) waits; a context let in never does (its next sentence, its
    text after a pause: its client is listening). Under way: every live
    job (``jobs``) that has spoken, or was let in, and has text to speak or a client still playing
    its audio (one that has caught up with text still coming holds its place until its client has
    heard it all). Past what the machine makes audio for, ticks that step everyone share the
    shortfall and every stream runs dry (the outside probe, 2026-12-07, the default voice on a
    2-core VM: 20 clients at once, all 20 underran, 26-44 s of stall in all); held, the newcomers
    start as places free, in the order of their wait less :data:`WAIT_PER_CONTEXT_S` for each
    context their connection has under way (one with many cannot take every place, issue 39's
    neighbour, yet its newcomer still comes up as it waits): first come, first served otherwise,
    since a wait of seconds must not go to whoever came last (``newest_first`` orders a backlog's
    prefills a tick, not this)."""
    if limit is None:
        return Admission(ready, 0, None, [])
    newcomers = [j for j in ready if j.starting]
    going: dict[int, int] = {}
    for job in jobs:
        if not job.starting and (job.starved_at != job.input_version or (job.play_end or -math.inf) > now):
            going[id(job.session)] = going.get(id(job.session), 0) + 1
    room = limit - sum(going.values())
    if room >= len(newcomers):
        return Admission(ready, 0, room - len(newcomers), [])
    order: list[Job] = []
    for _ in newcomers:  # one at a time: each place taken counts against its connection
        job = min((j for j in newcomers if j not in order),
                  key=lambda j: j.t_waiting + WAIT_PER_CONTEXT_S * going.get(id(j.session), 0))
        order.append(job)
        going[id(job.session)] = going.get(id(job.session), 0) + 1
    start = order[:max(0, room)]
    queued = order[len(start):]
    refused = [] if max_waiting is None else queued[max_waiting:]
    return Admission([j for j in ready if j in start or not j.starting], len(queued) - len(refused), 0, refused)


class AudioWorker:
    """The second thread: runs each tick's deferrable works (the codec decode of every session's
    new frames, resampling) as one batch while the model thread goes on with the next tick, and
    delivers every item of every job in order, so a job's audio always precedes its marks and
    its end. At most ``backlog`` ticks wait for it: then the model thread waits too."""

    def __init__(self, deliver: Callable[[Job, Any], None], deliver_audio: Callable[[Job, AudioChunk], None],
                 backlog: int = 2) -> None:
        self.deliver, self.deliver_audio = deliver, deliver_audio
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._room = threading.Semaphore(backlog)
        self._thread = threading.Thread(target=self._run, name="voicespec-audio", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=10)

    def item(self, job: Job, item: Any) -> None:
        self._queue.put((job, item))

    def works(self, jobs: list[Job], works: list[Work]) -> None:
        self._room.acquire()
        self._queue.put((jobs, works))

    def _run(self) -> None:
        while (entry := self._queue.get()) is not None:
            target, payload = entry
            if isinstance(target, Job):
                if isinstance(payload, AudioChunk):
                    self.deliver_audio(target, payload)
                else:
                    self.deliver(target, payload)
                continue
            try:
                t = time.perf_counter()
                results = run_works(payload)
                share = (time.perf_counter() - t) / len(payload)
            except Exception as e:  # those contexts end; the event loop hears why
                log.exception("audio stage failed")
                for job in target:
                    job.stream.cancel()
                    self.deliver(job, Failed(e))
                continue
            finally:
                self._room.release()
            for job, result in zip(target, results):
                job.busy_s += share
                if isinstance(result, AudioChunk) and not job.failed:
                    self.deliver_audio(job, result)


class DecodeWorker:
    """The thread that runs the model, tick by tick over every runnable job (module docstring),
    with an :class:`AudioWorker` beside it for the audio."""

    def __init__(self, queue_limit: int, deliver: Callable[[Job, Any], None], tick_contexts: int | None = None,
                 tick_prefill: int | None = None, spec_contexts: int | None = None,
                 decoding_contexts: int | None = None, waiting_contexts: int | None = None) -> None:
        self.queue_limit = queue_limit
        if decoding_contexts is not None and decoding_contexts < 1:
            raise ValueError(f"decoding_contexts must be >= 1 (or None), got {decoding_contexts}")
        self.decoding_contexts = decoding_contexts  # contexts under way at most (hold_newcomers); None: no limit
        self.waiting_contexts = waiting_contexts  # newcomers waiting for a place at most; past it turned away
        self.tick_contexts = tick_contexts  # at most this many contexts per tick (fair_share); None: all
        if tick_prefill is not None and tick_prefill < 1:
            raise ValueError(f"tick_prefill must be >= 1 (or None), got {tick_prefill}")
        self.tick_prefill = tick_prefill  # under a backlog, newcomers' prompts prefilled per tick (admit); None: all
        if spec_contexts is not None and spec_contexts < 0:
            raise ValueError(f"spec_contexts must be >= 0 (or None), got {spec_contexts}")
        # Speculation runs while a tick steps at most this many contexts (None: at any load). Past it
        # every pass is plain (SpecDecoder.plain_only), as vLLM's speculative_disable_by_batch_size
        # does: a draft widens the batched pass every session waits for, and its tokens are the
        # same either way. The per-session controller charges drafting by the batch, but its
        # pass-cost line learnt at one load lags the next: on the outside probe (2026-12-07, the
        # default voice) 16 clients starting at once all ran dry with speculation (stall 7.5-12 s)
        # and all played clean without it.
        self.spec_contexts = spec_contexts
        self._jobs: list[Job] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="voicespec-decode", daemon=True)
        self._audio = AudioWorker(deliver, self._deliver_audio)
        self.ticks = 0
        self.saturated = False  # the last tick left ready contexts out: speculation waits (SpecDecoder.plain_only)
        self.batch_sizes: deque[int] = deque(maxlen=256)  # target passes per tick, recent ticks
        self.held = 0  # newcomers waiting for a place under decoding_contexts at the last look
        self.free: int | None = decoding_contexts  # places left under it at the last look (None: no limit)

    def start(self) -> None:
        self._audio.start()
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        self._thread.join(timeout=10)
        self._audio.stop()

    def add(self, job: Job) -> None:
        with self._cond:
            self._jobs.append(job)
            self._cond.notify()

    def wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _runnable(self, now: float) -> tuple[list[tuple[Job, int]], float | None]:
        """The jobs that may take a step now (with their input version), else how long to wait.
        Finished and cancelled jobs leave here, their caches freed on this thread."""
        ready, wait, keep = [], None, []
        for job in self._jobs:
            if job.finished or job.stream.cancelled:
                if job.it is not None:
                    job.it.close()  # gives the cache rows back now
                continue
            keep.append(job)
            if job.starved_at == job.input_version or job.credits.outstanding >= self.queue_limit:
                continue
            if job.pacing_lead_s is not None and job.t_first_audio is not None:
                ahead = job.audio_s - (now - job.t_first_audio) - job.pacing_lead_s
                if ahead > 0:
                    wait = ahead if wait is None else min(wait, ahead)
                    continue
            if job.idle:  # text again after a pause: its wait for audio starts now
                job.idle, job.t_waiting = False, now
            ready.append((job, job.input_version))
        self._jobs = keep
        version = dict(ready)
        admission = hold_newcomers(list(version), keep, self.decoding_contexts, now, self.waiting_contexts)
        for job in admission.refused:
            self._end(job, Failed(AtCapacity(places_full(self.decoding_contexts, admission.waiting))))
        self.held, self.free = admission.waiting, admission.free
        for job in admission.jobs:
            job.let_in = True
        ready = [(job, version[job]) for job in fair_share(admission.jobs, self.tick_contexts, now, self.tick_prefill)]
        self.saturated = len(ready) < len(admission.jobs)
        return ready, (None if ready else wait)

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if self._stopping:
                        return
                    ready, wait = self._runnable(time.perf_counter())
                    if ready:
                        break
                    self._cond.wait(wait)
            self._tick(ready)

    def _tick(self, ready: list[tuple[Job, int]]) -> None:
        """One step of every ready job: each runs to the call it needs; the calls run batched, kind
        by kind (deferrable ones on the audio thread), and each job resumes with its result, until
        every job has made each kind of call at most once (one target pass, one codec push). Under
        a backlog a newcomer's prefill past the tick's budget waits, parked, for a later tick (admit)."""
        versions = dict(ready)
        admissions = self.tick_prefill if self.saturated else None
        jobs = [job for job, _ in ready]
        # a newcomer waiting for a place means the machine is full: no drafts widen its ticks
        plain = self.saturated or self.held > 0 or (self.spec_contexts is not None and len(jobs) > self.spec_contexts)
        for job in jobs:
            job.last_tick = self.ticks
            job.stream.decoder.plain_only = plain  # see SpecDecoder.plain_only
            if job.work is None:
                self._advance(job, None, versions[job])
        made: dict[int, set[type]] = {id(j): set() for j in jobs}
        while True:
            batch = [j for j in jobs if j.work is not None and not j.finished and type(j.work) not in made[id(j)]]
            if not batch:
                break
            for job in batch:
                made[id(job)].add(type(job.work))
            later = [j for j in batch if j.work.deferrable]
            now = [j for j in batch if not j.work.deferrable]
            if later:
                self._audio.works(later, [j.work for j in later])
                for job in later:
                    job.work = None
                    self._advance(job, DEFERRED, versions[job])
            now, admissions = admit(now, admissions, time.perf_counter())  # the rest stay parked at their prefill
            if not now:
                continue
            n_pass = sum(isinstance(j.work, Pass) for j in now)
            if n_pass:
                self.batch_sizes.append(n_pass)
            t = time.perf_counter()
            try:
                results = run_works([j.work for j in now])
            except Exception as e:  # a resource problem in a batched call: those contexts end, serving goes on
                log.exception("batched call failed")
                for job in now:
                    self._end(job, Failed(e))
                continue
            share = (time.perf_counter() - t) / len(now)
            for job, result in zip(now, results):
                job.busy_s += share
                job.work = None
                self._advance(job, result, versions[job])
        self.ticks += 1

    def _advance(self, job: Job, value: Any, version: int) -> None:
        """Resume ``job`` with ``value`` and run it until it parks at a call (:class:`Work`), waits
        for text, or ends; what it yields on the way goes out through the audio thread, in order."""
        t = time.perf_counter()
        try:
            if job.it is None:
                job.it = job.stream.run()
            while True:
                item = job.it.send(value)
                value = None
                if isinstance(item, Work):
                    job.work = item
                    return
                if item is None:
                    job.starved_at, job.idle = version, True
                    return
                self._audio.item(job, item)
        except StopIteration:
            self._end(job, FINISHED)
        except Exception as e:  # a bug or a resource problem: end this context, keep serving
            log.exception("synthesis failed")
            self._end(job, Failed(e))
        finally:
            job.busy_s += time.perf_counter() - t

    def _deliver_audio(self, job: Job, item: AudioChunk) -> None:
        """On the audio thread: count the chunk against the job's credits and pacing, pass it on."""
        now = time.perf_counter()
        job.credits.produced += 1
        job.t_first_audio = job.t_first_audio or now
        seconds = item.pcm.numel() / job.stream.stats.sample_rate
        job.audio_s += seconds
        job.play_end = max(job.play_end or now, now) + seconds
        self._audio.deliver(job, item)

    def _end(self, job: Job, item: Any) -> None:
        job.finished = True
        job.failed = isinstance(item, Failed)
        job.work = None
        if job.it is not None:
            job.it.close()
        self._audio.item(job, item)
