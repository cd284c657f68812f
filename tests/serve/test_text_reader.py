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


def _known(voice: Voice, script, speed: float) -> list[bool]:
    return [(tuple(ids), speed) in voice._durations for _, ids in script.sentences]


def test_a_worker_reads_what_this_process_reads_and_hands_back_the_durations(aligned_voice_dir, monkeypatch):
    here, served = Voice.load(aligned_voice_dir), Voice.load(aligned_voice_dir)
    options = SynthesisOptions(speed=1.2)
    reader = TextReader(1)
    reader.warm(served, wait=True)

    async def read():
        script = await reader.read(served, TEXT, False, None, options)
        first = _known(served, script, 1.2)  # the read waited for the first sentence's durations only
        await reader.settled()
        return script, first, list(reader._pool._processes)

    try:
        script, first, workers = asyncio.run(read())
    finally:
        reader.close()
    assert script == here.script(TEXT) and len(script.sentences) == 2
    assert first == [True, False] and _known(served, script, 1.2) == [True, True]
    assert workers and all(pid != os.getpid() for pid in workers)
    monkeypatch.setattr(served.duration, "predict", None)  # nothing to predict with here: only what was handed back answers
    for _, ids in script.sentences:
        assert served.durations(ids, 1.2) == here.durations(ids, 1.2)


@pytest.mark.parametrize("processes", [0, 1])
def test_later_sentences_wait_while_reads_wait(aligned_voice_dir, processes):
    """A burst of newcomers' first sentences goes before anyone's later ones."""
    voice = Voice.load(aligned_voice_dir)
    reader = TextReader(processes)
    reader.warm(voice, wait=True)
    text = "One sentence first. Then a second one. And a third to end."

    async def read():
        script = await reader.read(voice, text, False, None, SynthesisOptions())
        with reader._read_under_way():  # a read of another text
            await asyncio.sleep(0.3)
            waited = _known(voice, script, 1.0)
        await reader.settled()
        return script, waited

    try:
        script, waited = asyncio.run(read())
    finally:
        reader.close()
    assert waited == [True, False, False] and _known(voice, script, 1.0) == [True, True, True]


def test_a_dead_worker_costs_no_read_and_is_replaced(aligned_voice_dir):
    voice = Voice.load(aligned_voice_dir)
    reader = TextReader(1)
    try:
        reader.warm(voice, wait=True)
        (pid,) = reader._pool._processes
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)
        script = asyncio.run(reader.read(voice, TEXT, False, None, SynthesisOptions()))  # read here instead
        assert script == voice.script(TEXT)
        reader.warm(voice, wait=True)  # a new pool, which loads the voice again
        assert reader._ready(voice) is not None
        asyncio.run(reader.read(voice, TEXT, False, None, SynthesisOptions()))
        (new,) = reader._pool._processes  # a new worker took over
        assert new != pid and _alive(new)
    finally:
        reader.close()


def test_reads_do_not_wait_for_the_workers_to_load_the_voice(aligned_voice_dir):
    """A server answers at once: until its worker has loaded a voice, that voice's text is read
    on a thread here (the worker's start took 2.6 s cold on the 2-core VM)."""
    voice = Voice.load(aligned_voice_dir)
    reader = TextReader(1)
    try:
        reader._executor().submit(time.sleep, 30)  # the worker is busy: the voice's load waits behind this
        reader.warm(voice)
        t = time.monotonic()
        script = asyncio.run(reader.read(voice, TEXT, False, None, SynthesisOptions()))
        assert time.monotonic() - t < 20 and script == voice.script(TEXT)
        assert reader._ready(voice) is None  # read here: the worker has not loaded it yet
    finally:
        for pid in list(reader._pool._processes):
            os.kill(pid, signal.SIGKILL)  # no wait for its sleep
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


@pytest.mark.slow
def test_workers_run_the_servers_voicespec_whatever_the_working_directory(aligned_voice_dir, tmp_path):
    """A forkserver starts in the working directory: a checkout of another voicespec there must
    not stand in for the server's own code in its workers."""
    decoy = tmp_path / "cwd" / "voicespec" / "serve"
    decoy.mkdir(parents=True)
    for part in (decoy.parent / "__init__.py", decoy / "__init__.py", decoy / "text_reader.py"):
        part.write_text("")  # importable, and without the worker's functions
    script = tmp_path / "read.py"
    script.write_text(
        "import asyncio\n"
        "from voicespec.pipeline.synthesis import SynthesisOptions\n"
        "from voicespec.pipeline.voice import Voice\n"
        "from voicespec.serve.text_reader import TextReader\n"
        "if __name__ == '__main__':\n"
        "    reader, voice = TextReader(1), Voice.load(" + repr(str(aligned_voice_dir)) + ")\n"
        "    reader.warm(voice, wait=True)\n"
        "    workers = list(reader._pool._processes)\n"
        "    asyncio.run(reader.read(voice, 'Hello there.', False, None, SynthesisOptions()))\n"
        "    print(workers == list(reader._pool._processes))\n"
        "    reader.close()\n")
    out = subprocess.run([sys.executable, str(script)], cwd=decoy.parent.parent, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "True" and "could not load" not in out.stderr, out.stderr[-2000:]
