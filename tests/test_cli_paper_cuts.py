"""Issue 39, a new user's paper cuts, run for real: the CLI in process (one real subprocess),
a real server on loopback where one is involved.

a. ``client`` reports the server's first error for a request (text_too_long), not a later one
   that only follows from it.
b. ``say``, ``Voice.say``/``stream`` and ``synth`` speak text of any length, piece by piece.
c. ``client -`` reads stdin; ``client -o nodir/x.wav`` refuses as ``say`` does; ``--help`` states
   the protocol version the server speaks.
d. ``client`` waits for a server that is still starting (``--wait-s``).
e. ``say --output-raw`` streams s16le PCM as it is made.
"""

from __future__ import annotations

import asyncio
import io
import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import numpy as np
import pytest
import soundfile as sf

from voicespec.cli import main
from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.server import TTSServer

SENTENCE = "The quick brown fox jumps over the lazy dog near the river bank. "
FAST = ["--max-steps", "4", "--seed", "1"]  # a few decode steps per sentence: long text stays quick


def long_text(chars: int) -> str:
    return (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(voice, delay_s: float = 0.0, **overrides):
    """A TTSServer serving ``voice`` on its own loop and thread; yields its URL. ``delay_s``: it
    starts listening only that long after this yields (a server still loading its voice)."""
    config = ServerConfig(**{"port": 0, "max_steps": 4, "ping_interval_s": None, **overrides})
    server = TTSServer(config, voice)
    loop = asyncio.new_event_loop()
    started, stop, failure = threading.Event(), asyncio.Event(), []

    async def serve() -> None:
        await asyncio.sleep(delay_s)
        try:
            async with server:
                started.set()
                await stop.wait()
        except BaseException as e:
            failure.append(e)
            started.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    if not delay_s:
        assert started.wait(30) and not failure, failure
    try:
        yield f"ws://127.0.0.1:{config.port or server.port}{P.WS_PATH}"
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        loop.close()
        assert not failure, failure


def one_error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("voicespec: error: "), lines
    return lines[0]


# a. the first error of a request


@pytest.mark.parametrize("words_per_message", ["0", "100"])
def test_client_reports_the_servers_first_error_for_a_text_too_long(tiny_voice, tmp_path, capsys, words_per_message):
    """All at once, the text is rejected and the context's end then finds no text; in pieces, the
    later pieces are rejected while the earlier ones are spoken. Either way: text_too_long."""
    out = tmp_path / "c.wav"
    with running(tiny_voice) as url:
        code = main(["client", "word " * 1300, "-o", str(out), "--url", url, "--words-per-message", words_per_message])
    assert code == 2
    line = one_error_line(capsys)
    assert line.startswith(f"voicespec: error: server: {P.TEXT_TOO_LONG}: text rejected") and "5000" in line, line
    assert not out.exists()


# b. long text


@pytest.mark.slow
def test_say_speaks_a_20000_character_text_whole(tiny_voice_dir, tmp_path):
    frames = {}
    for chars in (2000, 20000):
        out = tmp_path / f"{chars}.wav"
        assert main(["say", long_text(chars), "-o", str(out), "--model", str(tiny_voice_dir), *FAST]) == 0
        frames[chars] = sf.info(str(out)).frames
    assert frames[2000] > 0 and frames[20000] > 8 * frames[2000]  # every sentence spoken, 10 times the text


@pytest.mark.slow
def test_voice_say_and_stream_take_long_text_sentence_for_sentence(tiny_voice):
    from voicespec.api import text_pieces
    from voicespec.frontend.text import FrontEnd

    text = long_text(12000)
    unlimited = FrontEnd(tiny_voice.tokenizer, max_chars=10**6).sentences(text)  # the whole text at once
    pieces = list(text_pieces(text, tiny_voice.frontend.max_chars))
    assert len(pieces) == 3 and "".join(pieces) == text and all(p.endswith(". ") for p in pieces[:-1])
    audio = tiny_voice.say(text, seed=1, max_steps=4)
    assert audio.stats.sentences == len(unlimited) and audio.duration_s > 0
    stream = tiny_voice.stream(text, seed=1, max_steps=4)
    pcm = np.concatenate([c.pcm.numpy() for c in stream])
    assert np.array_equal(pcm, audio.pcm)  # the same sentences, seeds and waveform, chunk by chunk
    assert [s for s, _ in stream.sentences] == [s for s, _ in unlimited]


def test_a_text_that_fits_is_synthesized_as_before(tiny_voice):
    from voicespec.pipeline.synthesis import SynthesisStream, collect, request_options

    text = "Good morning. It is 7:30."
    before = collect(SynthesisStream(tiny_voice, text, request_options(tiny_voice, seed=3, max_steps=8)))
    assert np.array_equal(tiny_voice.say(text, seed=3, max_steps=8).pcm, before.pcm)


@pytest.mark.slow
def test_synth_speaks_a_long_line(tiny_voice_dir, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("Short one.\n" + long_text(9000) + "\n")
    out = tmp_path / "out"
    assert main(["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir), *FAST]) == 0
    assert "2 written, 0 skipped, 0 failed" in capsys.readouterr().out
    short, chapter = (sf.info(str(p)).frames for p in sorted(out.glob("*.wav")))
    assert chapter > 20 * short > 0


@pytest.mark.slow
def test_a_bad_character_late_in_a_long_text_fails_and_leaves_no_file(tiny_voice_dir, tmp_path, capsys):
    out = tmp_path / "x.wav"
    text = long_text(6000) + " Then \ud800 came."
    assert main(["say", text, "-o", str(out), "--model", str(tiny_voice_dir), *FAST]) == 2
    assert one_error_line(capsys).startswith("voicespec: error: text holds a lone surrogate U+D800")
    assert list(tmp_path.iterdir()) == []  # the audio written so far went with its temporary file


# c. client: stdin, folders, help


def test_client_dash_reads_stdin_and_writes_stdout_like_say(tiny_voice, tmp_path, monkeypatch, capsysbinary):
    given, piped = tmp_path / "given.wav", tmp_path / "piped.wav"
    with running(tiny_voice) as url:
        assert main(["client", "Hello there.", "-o", str(given), "--url", url, "--seed", "5"]) == 0
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("Hello there.\n".encode())))
        assert main(["client", "-", "-o", str(piped), "--url", url, "--seed", "5"]) == 0
        assert b"TTFA" in capsysbinary.readouterr().out
        assert main(["client", "Hello there.", "-o", "-", "--url", url, "--seed", "5"]) == 0
    out, err = capsysbinary.readouterr()
    assert sf.info(str(piped)).frames > 0 and piped.read_bytes() == given.read_bytes()
    assert out == given.read_bytes() and b"TTFA" in err  # the audio alone on stdout, the summary on stderr


def test_client_refuses_a_missing_folder_as_say_does(tmp_path, capsys):
    out = tmp_path / "nodir" / "x.wav"
    url = f"ws://127.0.0.1:{free_port()}/v1/stream"  # never reached: the output is checked first
    assert main(["client", "hi", "-o", str(out), "--url", url]) == 2
    assert one_error_line(capsys) == (f"voicespec: error: {out.parent}: no such folder (client writes into an "
                                      "existing folder; create it first)")
    assert not (tmp_path / "nodir").exists()


def test_help_states_the_protocol_version_the_server_speaks(capsys):
    with pytest.raises(SystemExit):
        main(["client", "--help"])
    client = " ".join(capsys.readouterr().out.split())
    assert f"protocol {P.PROTOCOL_VERSION}" in client and "--wait-s" in client and "(default: 15.0)" in client
    with pytest.raises(SystemExit):
        main(["--help"])
    top = " ".join(capsys.readouterr().out.split())
    assert f"(protocol {P.PROTOCOL_VERSION})" in top and "protocol v1" not in top


# d. waiting for a server that is still starting


@pytest.mark.slow
def test_client_waits_for_a_server_that_is_still_starting(tiny_voice, tmp_path, capsys):
    port, out = free_port(), tmp_path / "late.wav"
    with running(tiny_voice, delay_s=1.5, port=port) as url:
        t0 = time.monotonic()
        assert main(["client", "Hello.", "-o", str(out), "--url", url]) == 0
    assert time.monotonic() - t0 >= 1.4 and sf.info(str(out)).frames > 0


def test_client_gives_up_after_wait_s_naming_the_url(tmp_path, capsys):
    url = f"ws://127.0.0.1:{free_port()}/v1/stream"
    t0 = time.monotonic()
    assert main(["client", "hi", "-o", str(tmp_path / "x.wav"), "--url", url, "--wait-s", "0.6"]) == 2
    assert 0.5 <= time.monotonic() - t0 < 10
    assert one_error_line(capsys).startswith(f"voicespec: error: could not connect to {url} (connection refused)")
    assert not list(tmp_path.iterdir())


# e. raw PCM as it is made


def test_output_raw_is_the_pcm_of_the_wav_say_writes(tiny_voice_dir, tmp_path, capsysbinary):
    wav = tmp_path / "a.wav"
    common = ["Good morning. The train leaves at seven.", "--model", str(tiny_voice_dir), "--seed", "3"]
    assert main(["say", *common, "-o", str(wav)]) == 0
    capsysbinary.readouterr()
    assert main(["say", *common, "--output-raw"]) == 0
    out, err = capsysbinary.readouterr()
    pcm, rate = sf.read(str(wav), dtype="int16")
    assert len(out) > 0 and out == pcm.astype("<i2").tobytes()
    assert f"s16le, mono, {rate} Hz" in err.decode()


def test_output_raw_and_output_are_one_or_the_other(tiny_voice_dir, capsys):
    assert main(["say", "hi", "-o", "x.wav", "--output-raw"]) == 2
    assert "not allowed with argument" in one_error_line(capsys)
    assert main(["say", "hi", "--output-raw", "--format", "flac", "--model", str(tiny_voice_dir)]) == 2
    assert "--format does not apply to --output-raw" in one_error_line(capsys)


@pytest.mark.slow
def test_output_raw_arrives_while_it_is_made_and_a_closed_pipe_ends_it_quietly(tiny_voice_dir):
    """Bytes keep coming while synthesis runs (written whole at the end, 100 kB would arrive at
    once); then the reader goes away (``| head -c``) and the command ends quietly."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen([sys.executable, "-m", "voicespec", "say", "-", "--output-raw", "--model", str(tiny_voice_dir),
                             *FAST], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        proc.stdin.write(long_text(20000).encode())
        proc.stdin.close()
        fd = proc.stdout.fileno()
        got = len(os.read(fd, 1 << 16))
        t_first = time.monotonic()
        while got < 100_000:
            chunk = os.read(fd, 1 << 16)
            if not chunk:  # it ended early: the assert below says so
                break
            got += len(chunk)
        spread = time.monotonic() - t_first
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(120) == 0, err
    finally:
        proc.kill()
    assert got >= 100_000 and spread > 0.1, (got, spread)
    assert "Traceback" not in err and "Broken pipe" not in err and "s16le, mono" in err
