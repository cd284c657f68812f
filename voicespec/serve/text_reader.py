"""Served text read in a process of its own: its sentences, phonemes and durations.

The front end is pure Python (gruut's tokenizer, tagger and lexicon: ~3 ms a sentence on the 2-core
VM, and as much again for the durations) and holds the interpreter lock while it runs, which the
decode thread needs between every two of its torch calls: a burst of new sessions' text slowed every
session's steps. 16 clients starting at once (2026-12-07, the default voice, two sentences each):
first audio 438-467 ms after the text with the front end on threads of the server's process,
335-342 ms with it in a worker process (two bursts each). vLLM keeps tokenization out of its engine
core's process for the same reason.

A worker loads each voice it is asked for from the voice's folder (its weights are memory-mapped,
so the copy costs little memory) and returns the script and the sentences' durations, which the
server's voice remembers, so the decode thread does not predict them. Workers start from a
forkserver (a clean process that imported torch once), never by forking the threaded server.
A voice built in memory (no folder), ``processes == 0``, a voice the workers are still loading (a
server answers before its worker is up), or a worker that died: the text is read on a thread of the
server's process, which has the voice's front end loaded too.

A read waits for the first sentence's durations only: the later sentences' are worked out after it,
one sentence a job, each once no read is waiting, so a burst of newcomers' first sentences never
queues behind another text's tail (durations cost more than the reading itself). A later sentence
whose durations are not back when its turn comes has them predicted where it is decoded: the same
numbers, one thread each side. Measured on the 2-core VM (2026-12-07, scripts/text_read_time.py):
a 40-sentence text read in 86-98 ms instead of 204-267, and a burst of 16 two-sentence texts all
read after 120-153 ms instead of 179-194.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, wait as wait_all
from contextlib import contextmanager
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from voicespec.frontend.ssml import Script
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.threads import use_threads

log = logging.getLogger("voicespec.serve")

T = TypeVar("T")
_VOICES: dict[str, Voice] = {}  # in a worker: the voices it has read for, by folder


def read_text(voice: Voice, text: str, ssml: bool | None, lexicon: Mapping[str, str] | None,
              options: SynthesisOptions, sentences: int | None = None) -> tuple[Script, list[list[int] | None]]:
    """``text``'s script (TextError and its kin say what is wrong) and the durations of its first
    ``sentences`` sentences (None: all) at the speed its stream will ask for
    (:meth:`SynthesisOptions.speed_of`); a sentence whose durations cannot be predicted ends the
    list (its stream meets the same error where it always did)."""
    script = voice.script(text, ssml=ssml, lexicon=lexicon)
    wanted = script.sentences if sentences is None else script.sentences[:sentences]
    return script, durations_of(voice, [(ids, options.speed_of(script, i)) for i, (_, ids) in enumerate(wanted)])


def durations_of(voice: Voice, sentences: Sequence[tuple[list[int], float]]) -> list[list[int] | None]:
    """:meth:`Voice.durations` of each ``(ids, speed)``, up to the first that cannot be predicted."""
    out: list[list[int] | None] = []
    for ids, speed in sentences:
        try:
            out.append(voice.durations(ids, speed))
        except ValueError:
            break
    return out


def _start_worker(server: tuple[int, str | None]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C in the server's terminal: the server stops us
    use_threads(1)  # the duration predictor's few small products: torch's default pool would spin beside the decode thread
    threading.Thread(target=_exit_with, args=(server,), name="voicespec-text-watch", daemon=True).start()


def _process_id(pid: int) -> tuple[int, str | None]:
    """``pid`` and its start time (None where there is no /proc): a pid reused later differs."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return pid, f.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return pid, None


def _exit_with(server: tuple[int, str | None]) -> None:
    """End this worker once the server's process is gone (killed, so it could not stop us): a
    worker holds both ends of its task pipe, so it would wait for tasks forever, and hold the
    forkserver open with it."""
    while True:
        time.sleep(1.0)
        try:
            os.kill(server[0], 0)
        except ProcessLookupError:
            os._exit(0)
        except PermissionError:  # the pid is another user's now: the server is gone
            os._exit(0)
        if server[1] is not None and _process_id(server[0]) != server:  # the pid was reused
            os._exit(0)


def _in_worker(folder: str, work: Callable[..., T], *args: Any) -> T:
    """``work(voice, *args)`` with the voice of ``folder``, loaded on this worker's first ask."""
    voice = _VOICES.get(folder)
    if voice is None:
        voice = _VOICES[folder] = Voice.load(folder)
    return work(voice, *args)


def _warm_up(voice: Voice) -> None:
    """Load the voice and read a word with it, so its lazy parts (the phonemizer's lexicon) load too."""
    read_text(voice, "Ready.", False, None, SynthesisOptions())


class TextReader:
    """``await read(voice, text, ...)``: the script of a served text, its durations remembered by
    ``voice``; in ``processes`` worker processes (0: on a thread). One per server."""

    FIRST_SENTENCES = 1  # sentences whose durations a read waits for; the rest follow (the module's docstring)

    def __init__(self, processes: int = 1) -> None:
        if processes < 0:
            raise ValueError(f"processes must be >= 0, got {processes}")
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        # The voices the workers load (a new pool loads them again), each with its loads in the
        # current pool: its text is read on a thread until they are done.
        self._loads: dict[str, list[Future]] = {}
        # The pool is made or replaced from the loop, from voice-loading threads and from a load's
        # callback (which runs at once, here, on a load that has ended already).
        self._lock = threading.RLock()
        self._reading = 0  # reads waiting for their first sentences: later sentences' jobs wait for none
        self._idle: tuple[asyncio.AbstractEventLoop, asyncio.Event] | None = None  # set while _reading is 0
        self._later: set[asyncio.Task] = set()  # the later sentences' durations under way
        self._closed = False

    def _executor(self) -> ProcessPoolExecutor | None:
        with self._lock:
            if self._pool is None and self.processes:
                context = multiprocessing.get_context("forkserver")
                # torch imported once, in the forkserver; voicespec in each worker, after it has taken
                # this process's sys.path: the forkserver's own path starts at the working directory,
                # where another checkout of voicespec would stand in for this one
                context.set_forkserver_preload(["torch"])
                self._pool = ProcessPoolExecutor(self.processes, mp_context=context, initializer=_start_worker,
                                                 initargs=(_process_id(os.getpid()),))
                for folder in self._loads:  # replacing a dead pool: its voices loaded again
                    self._loads[folder] = self._load(self._pool, folder)
            return self._pool

    def _load(self, pool: ProcessPoolExecutor, folder: str) -> list[Future]:
        """Load the voice of ``folder`` in every worker of ``pool``; one that cannot is replaced."""
        loads = [pool.submit(_in_worker, folder, _warm_up) for _ in range(self.processes)]
        for load in loads:
            load.add_done_callback(lambda f: self._loaded(pool, folder, f))
        return loads

    def _loaded(self, pool: ProcessPoolExecutor, folder: str, future: Future) -> None:
        """A load's end: a voice that cannot load in a worker is read on threads; a dead worker is
        replaced on the next read, and its voices loaded again."""
        if future.cancelled() or future.exception() is None:
            return
        log.error("the text worker could not load voice %s; reading its text on threads for now", folder,
                  exc_info=future.exception())
        if isinstance(future.exception(), BrokenProcessPool):
            self._drop(pool)

    def _drop(self, pool: ProcessPoolExecutor) -> None:
        """Forget a pool whose worker died (the next read starts another), unless that happened already."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def warm(self, voice: Voice, wait: bool = False) -> None:
        """Start loading ``voice`` in the workers, so its reads do not pay it; until they have, its
        text is read on a thread here (a server answers at once instead of after a worker's start:
        2.6 s cold on the 2-core VM). ``wait``: block until they have (tests)."""
        pool = None if voice.folder is None else self._executor()
        if pool is None:
            return
        folder = str(voice.folder)
        try:
            with self._lock:
                if folder not in self._loads and self._pool is pool:
                    self._loads[folder] = self._load(pool, folder)
                loads = self._loads.get(folder, [])
        except BrokenProcessPool:  # its worker died since: the next read starts another
            self._drop(pool)
            return
        if wait:
            wait_all(loads)

    def _ready(self, voice: Voice) -> ProcessPoolExecutor | None:
        """The pool, once it has loaded ``voice`` (which it starts to, if it has not); else None."""
        if voice.folder is None or not self.processes:
            return None
        self.warm(voice)
        with self._lock:
            pool, loads = self._pool, self._loads.get(str(voice.folder), [])
        done = loads and all(f.done() and not f.cancelled() and f.exception() is None for f in loads)
        return pool if done else None

    async def _run(self, voice: Voice, work: Callable[..., T], *args: Any) -> T:
        """``work(voice, *args)`` in a worker process, else (no folder, no processes, the voice not
        loaded there yet, a worker that died: others are started) on a thread."""
        pool = self._ready(voice)
        if pool is not None:
            try:
                return await asyncio.get_running_loop().run_in_executor(pool, _in_worker, str(voice.folder), work, *args)
            except BrokenProcessPool:  # killed, out of memory: start others, do this one here
                log.warning("a text worker process died; starting new ones")
                self._drop(pool)
        return await asyncio.to_thread(work, voice, *args)

    async def read(self, voice: Voice, text: str, ssml: bool | None, lexicon: Mapping[str, str] | None,
                   options: SynthesisOptions) -> Script:
        with self._read_under_way():
            script, durations = await self._run(voice, read_text, text, ssml, lexicon, options, self.FIRST_SENTENCES)
        sentences = [(ids, options.speed_of(script, i)) for i, (_, ids) in enumerate(script.sentences)]
        for (ids, speed), d in zip(sentences, durations):
            if d is not None:
                voice.remember_durations(ids, speed, d)
        if voice.duration is not None and len(durations) == self.FIRST_SENTENCES < len(sentences):  # none failed: read on
            task = asyncio.create_task(self._read_later(voice, sentences[len(durations):]))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
        return script

    def _idle_event(self) -> asyncio.Event:
        """Set while no read waits; one for the running loop (a reader may outlive a loop: tests)."""
        loop = asyncio.get_running_loop()
        if self._idle is None or self._idle[0] is not loop:
            self._idle = loop, asyncio.Event()
            if not self._reading:
                self._idle[1].set()
        return self._idle[1]

    @contextmanager
    def _read_under_way(self) -> Iterator[None]:
        """A read waits for its first sentences within: later sentences' jobs wait for its end."""
        self._reading += 1
        self._idle_event().clear()
        try:
            yield
        finally:
            self._reading -= 1
            if not self._reading:
                self._idle_event().set()

    async def _read_later(self, voice: Voice, sentences: list[tuple[list[int], float]]) -> None:
        """The durations of a read's later sentences, one a job, each once no read waits."""
        for ids, speed in sentences:
            while self._reading:
                await self._idle_event().wait()
            if self._closed:
                return
            try:
                found = await self._run(voice, durations_of, [(ids, speed)])
            except Exception:  # noqa: BLE001 - not fatal: where the sentence is decoded, it is predicted (or fails) again
                log.debug("later durations failed", exc_info=True)
                return
            if not found:  # cannot be predicted: its stream says so when it gets there
                return
            voice.remember_durations(ids, speed, found[0])

    async def settled(self) -> None:
        """Wait until every read's later sentences are remembered (tests; a drained server)."""
        while self._later:
            await asyncio.gather(*self._later, return_exceptions=True)

    def close(self) -> None:
        """Stop the workers (each finishes the text it is reading: milliseconds)."""
        with self._lock:
            pool, self._pool, self.processes, self._closed = self._pool, None, 0, True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
