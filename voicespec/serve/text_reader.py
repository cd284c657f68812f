"""Served text read in a process of its own: its sentences, phonemes and durations.

The front end is pure Python (gruut's tokenizer, tagger and lexicon: ~3 ms a sentence on the 2-core
VM, and as much again for the durations) and holds the interpreter lock while it runs, which the
decode thread needs between every two of its torch calls: a burst of new sessions' text slowed every
session's steps. 16 clients starting at once (2026-12-07, the default voice, two sentences each):
first audio 438-467 ms after the text with the front end on threads of the server's process,
335-342 ms with it in a worker process (two bursts each). vLLM keeps tokenization out of its engine
core's process for the same reason.

A worker loads each voice it is asked for from the voice's folder (its weights are memory-mapped,
so the copy costs little memory) and returns the script and each sentence's durations, which the
server's voice remembers, so the decode thread does not predict them. Workers start from a
forkserver (a clean process that imported voicespec once), never by forking the threaded server.
A voice built in memory (no folder), ``processes == 0``, or a worker that died: the text is read on
a thread of the server's process, as before.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from voicespec.frontend.ssml import Script
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.threads import use_threads

log = logging.getLogger("voicespec.serve")

_VOICES: dict[str, Voice] = {}  # in a worker: the voices it has read for, by folder


def read_text(voice: Voice, text: str, ssml: bool | None, lexicon: Mapping[str, str] | None,
              options: SynthesisOptions) -> tuple[Script, list[list[int] | None]]:
    """``text``'s script (TextError and its kin say what is wrong) and each sentence's durations at
    the speed its stream will ask for (:meth:`SynthesisOptions.speed_of`); a sentence whose
    durations cannot be predicted ends the list (its stream meets the same error where it always did)."""
    script = voice.script(text, ssml=ssml, lexicon=lexicon)
    durations: list[list[int] | None] = []
    for i, (_, ids) in enumerate(script.sentences):
        try:
            durations.append(voice.durations(ids, options.speed_of(script, i)))
        except ValueError:
            break
    return script, durations


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


def _read_in_worker(folder: str, text: str, ssml: bool | None, lexicon: Mapping[str, str] | None,
                    options: SynthesisOptions) -> tuple[Script, list[list[int] | None]]:
    voice = _VOICES.get(folder)
    if voice is None:
        voice = _VOICES[folder] = Voice.load(folder)
    return read_text(voice, text, ssml, lexicon, options)


class TextReader:
    """``await read(voice, text, ...)``: the script of a served text, its durations remembered by
    ``voice``; in ``processes`` worker processes (0: on a thread). One per server."""

    def __init__(self, processes: int = 1) -> None:
        if processes < 0:
            raise ValueError(f"processes must be >= 0, got {processes}")
        self.processes = processes
        self._pool: ProcessPoolExecutor | None = None
        self._folders: set[str] = set()  # the voices the workers load: a new pool loads them again
        self._lock = threading.Lock()  # the pool is made or replaced from the loop and from voice-loading threads

    def _executor(self) -> ProcessPoolExecutor | None:
        with self._lock:
            if self._pool is None and self.processes:
                context = multiprocessing.get_context("forkserver")
                context.set_forkserver_preload([__name__])  # torch and the front end imported once, in the forkserver
                self._pool = ProcessPoolExecutor(self.processes, mp_context=context, initializer=_start_worker,
                                                 initargs=(_process_id(os.getpid()),))
                for folder in self._folders:  # replacing a dead pool: its voices loaded again, not waited for
                    self._pool.submit(_read_in_worker, folder, "Ready.", False, None, SynthesisOptions())
            return self._pool

    def _drop(self, pool: ProcessPoolExecutor) -> None:
        """Forget a pool whose worker died (the next read starts another), unless that happened already."""
        with self._lock:
            if self._pool is pool:
                self._pool = None
        pool.shutdown(wait=False, cancel_futures=True)

    def warm(self, voice: Voice) -> None:
        """Load ``voice`` in the workers now (blocking), so its first request does not pay it; a
        worker that fails to is replaced on the next read (the reads go on, on a thread)."""
        pool = None if voice.folder is None else self._executor()
        if pool is None:
            return
        self._folders.add(str(voice.folder))
        try:
            for future in [pool.submit(_read_in_worker, str(voice.folder), "Ready.", False, None, SynthesisOptions())
                           for _ in range(self.processes)]:
                future.result()
        except Exception:  # noqa: BLE001 - a worker that cannot start or load: served on threads until replaced
            log.exception("the text worker could not load voice %s; reading its text on threads for now", voice.folder)
            self._drop(pool)

    async def read(self, voice: Voice, text: str, ssml: bool | None, lexicon: Mapping[str, str] | None,
                   options: SynthesisOptions) -> Script:
        pool = None if voice.folder is None else self._executor()
        if pool is not None:
            try:
                script, durations = await asyncio.get_running_loop().run_in_executor(
                    pool, _read_in_worker, str(voice.folder), text, ssml, lexicon, options)
            except BrokenProcessPool:  # a worker died (killed, out of memory): start others, read this one here
                log.warning("a text worker process died; starting new ones")
                self._drop(pool)
            else:
                for i, ((_, ids), d) in enumerate(zip(script.sentences, durations)):
                    if d is not None:
                        voice.remember_durations(ids, options.speed_of(script, i), d)
                return script
        return (await asyncio.to_thread(read_text, voice, text, ssml, lexicon, options))[0]

    def close(self) -> None:
        """Stop the workers (each finishes the text it is reading: milliseconds)."""
        with self._lock:
            pool, self._pool, self.processes = self._pool, None, 0
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
