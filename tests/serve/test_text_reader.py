"""The served text's front end in a worker process (serve/text_reader.py): the same script and
durations as in this process, a dead worker replaced without losing a read, and no worker left
behind by a server that was killed."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve.text_reader import TextReader

TEXT = "Hello there. A second sentence, spoken slower."


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone too
        return f.read().split()[2] != "Z"


def test_a_worker_reads_what_this_process_reads_and_hands_back_the_durations(aligned_voice_dir, monkeypatch):
    here, served = Voice.load(aligned_voice_dir), Voice.load(aligned_voice_dir)
    options = SynthesisOptions(speed=1.2)
    reader = TextReader(1)
    try:
        script = asyncio.run(reader.read(served, TEXT, False, None, options))
        workers = list(reader._pool._processes)
    finally:
        reader.close()
    assert script == here.script(TEXT) and len(script.sentences) == 2
    assert workers and all(pid != os.getpid() for pid in workers)
    monkeypatch.setattr(served.duration, "predict", None)  # nothing to predict with here: only what was handed back answers
    for _, ids in script.sentences:
        assert served.durations(ids, 1.2) == here.durations(ids, 1.2)


def test_a_dead_worker_costs_no_read_and_is_replaced(aligned_voice_dir):
    voice = Voice.load(aligned_voice_dir)
    reader = TextReader(1)
    try:
        reader.warm(voice)
        (pid,) = reader._pool._processes
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)
        script = asyncio.run(reader.read(voice, TEXT, False, None, SynthesisOptions()))  # read here instead
        assert script == voice.script(TEXT)
        asyncio.run(reader.read(voice, TEXT, False, None, SynthesisOptions()))
        (new,) = reader._pool._processes  # a new worker took over
        assert new != pid and _alive(new)
    finally:
        reader.close()


@pytest.mark.slow
def test_no_worker_outlives_a_killed_server(aligned_voice_dir):
    code = ("import sys; from voicespec.pipeline.voice import Voice; from voicespec.serve.text_reader import TextReader; "
            f"r = TextReader(1); r.warm(Voice.load({str(aligned_voice_dir)!r})); print(*r._pool._processes, flush=True); "
            "sys.stdin.read()")
    server = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = int(server.stdout.readline())
    assert _alive(pid)
    server.kill()  # no chance to stop its workers
    server.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(pid)
