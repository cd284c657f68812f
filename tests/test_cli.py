"""The command line, run for real: subprocesses, real files, a real SIGKILL."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import soundfile as sf

from voicespec.batch import PROGRESS
from voicespec.cli import main

ENV = {**os.environ, "PYTHONWARNINGS": "ignore"}


def voicespec(*args: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "voicespec.cli", *args], capture_output=True, text=True, env=ENV, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"voicespec {args} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


@pytest.mark.slow
def test_say_writes_audio_and_prints_one_summary_line(tiny_voice_dir, tmp_path):
    out, dump = tmp_path / "a.flac", tmp_path / "tokens.json"
    proc = voicespec("say", "Good morning. It is 7:30.", "-o", str(out), "--model", str(tiny_voice_dir),
                     "--sample-rate", "16000", "--seed", "3", "--dump-tokens", str(dump), "--gamma", "2")
    line = proc.stdout.strip()
    assert "\n" not in line and "RTF" in line and "acceptance" in line and "mean accepted length" in line
    info = sf.info(str(out))
    assert info.samplerate == 16000 and info.frames > 0
    tokens = json.loads(dump.read_text())
    assert tokens["sentences"] == ["good morning.", "it is seven thirty."]
    assert len(tokens["frames"]) == 2 and len(tokens["frames"][0]) == 4


@pytest.mark.parametrize(
    "args,fragment",
    [
        (["say", "hi", "-o", "x.aiff"], "unsupported extension"),
        (["say", "hi", "-o", "x.flac", "--format", "mp3"], "x.flac: the extension says flac but --format says mp3"),
        (["say", "hi", "-o", "x.wav", "--format", "aiff"], "argument --format: invalid choice: 'aiff'"),
        (["say", "hi", "-o", "missing/x.wav"], "missing: no such folder"),
        (["say", "hi", "-o", "x.wav", "--speed", "3"], "speed must be a number in [0.5, 2]"),
        (["say", "hi", "-o", "x.wav", "--speed", "fast"], "speed must be a number in [0.5, 2]"),
        (["say", "hi", "-o", "x.wav", "--speed", "1.5"], "has no duration predictor"),
        (["say", "こんにちは", "-o", "x.wav"], "it speaks English text and found no letters or digits it can read"),
        (["synth", "in.txt", "-o", "out", "--format", "aiff"], "argument --format: invalid choice: 'aiff'"),
        (["synth", "in.txt", "-o", "out", "--speed", "0.1"], "speed must be a number in [0.5, 2]"),
        (["generate", "--model", "m", "--text-ids", "1", "--frames-per-id", "0"], "frames per id must be > 0"),
        (["say", "", "-o", "x.wav"], "empty"),
        (["say", "hi", "-o", "x.wav", "--gamma", "-1"], "gamma must be an integer >= 0 or 'auto'"),
        (["say", "hi", "-o", "x.wav", "--top-k", "2.5"], "--top-k: invalid int value"),
        (["say", "hi", "-o", "x.wav", "--temperature", "-2"], "temperature"),
        (["say", "hi", "-o", "x.wav", "--drafter", "magic"], "unknown drafter"),
        (["say", "hi", "-o", "x.wav", "--sample-rate", "11025"], "sample rate must be one of 8000"),
        (["serve", "--port", "99999"], "port must be 0-65535"),
        (["serve", "--max-sessions", "0"], "max sessions must be > 0"),
        (["serve", "--max-decoding-contexts", "0"], "max decoding contexts must be > 0"),
        (["serve", "--max-waiting-contexts", "2"], "max_waiting_contexts needs max_decoding_contexts"),
        (["client", "hi", "-o", "x.wav", "--url", "ws://[bad"], "bad server URL"),
        (["client", "hi", "-o", "x.wav", "--url", "http://example.com"], "server URL must look like ws://"),
        (["client", "hi", "-o", "x.wav", "--url", "ws://127.0.0.1:9/v1/stream", "--wait-s", "0"], "could not"),
        (["train", "lm", "--bogus"], "the following arguments are required: --data"),
        (["say", "hi", "-o", "x.wav", "--model", "/nonexistent/voice"], "/nonexistent/voice: no such voice folder"),
        (["say", "hi", "-o", "x.wav", "--model", "no-such-voice"], "unknown voice 'no-such-voice'"),
        (["synth", "/nonexistent.txt", "-o", "out"], "no such input file"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_bad_arguments_give_one_line_and_status_2(tiny_voice_dir, tmp_path, monkeypatch, capsys, args, fragment):
    """In-process (one real subprocess below): exit status 2 and exactly one stderr line."""
    if "--model" not in args and args[0] in ("say", "synth"):
        args = [*args, "--model", str(tiny_voice_dir)]
    monkeypatch.chdir(tmp_path)
    assert main(args) == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("voicespec: error:") and fragment in lines[0], err
    assert not list(tmp_path.iterdir()), "a failed command must leave no files behind"


def test_bad_arguments_from_a_real_process():
    proc = voicespec("say", "--temperature", "hot", "hi", "-o", "x.wav", check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["voicespec: error: argument --temperature: invalid float value: 'hot'"]


def _wavs(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.wav"))}


LINES = [
    {"id": "a", "text": "The quick brown fox."},
    {"id": "b", "text": "Jumps over the lazy dog!", "seed": 5},
    {"id": "c", "text": "   "},  # nothing to say: a failure that must not stop the run
    "this line is not json",
    {"id": "d", "text": "Numbers like 42 and 1999.", "temperature": 0.5},
    {"id": "e", "text": "Bad option.", "top_p": 7},
    {"id": "f", "text": "Almost done now."},
    {"id": "g", "text": "The very last one."},
]


def write_input(path: Path) -> None:
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in LINES))


@pytest.mark.slow
def test_synth_survives_sigkill_and_resumes_identically(tiny_voice_dir, tmp_path):
    src = tmp_path / "in.jsonl"
    write_input(src)
    common = ["--model", str(tiny_voice_dir), "--seed", "11"]

    reference = tmp_path / "reference"
    proc = voicespec("synth", str(src), "-o", str(reference), *common, check=False)
    assert proc.returncode == 1  # some lines fail on purpose
    summary = json.loads((reference / "summary.json").read_text())
    assert (summary["ok"], summary["failed"]) == (5, 3)
    assert {f.get("id") for f in summary["failures"]} == {"c", "e", None}
    expected = _wavs(reference)
    assert sorted(expected) == ["a.wav", "b.wav", "d.wav", "f.wav", "g.wav"]

    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "voicespec.cli", "synth", str(src), "-o", str(killed), *common]
    child = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    deadline = time.time() + 120
    while time.time() < deadline and not (killed / "b.wav").exists():
        time.sleep(0.02)
    child.send_signal(signal.SIGKILL)
    child.wait()
    partial = _wavs(killed)
    assert "b.wav" in partial and len(partial) < len(expected), "the kill should land mid-run"
    for name, data in partial.items():  # whatever exists is complete
        assert data == expected[name]
    # What else the kill may leave is the hidden temporary file of the output it was writing
    # (audio.atomic_open's ".<name>.<random>.part"), which no "*.wav" glob or resume mistakes for output.
    for p in killed.iterdir():
        if p.name not in partial and p.name != PROGRESS:
            m = re.fullmatch(r"\.([a-z]\.wav)\.\w+\.part", p.name)
            assert m and m.group(1) in expected and m.group(1) not in partial, f"stray file {p.name!r}"

    # Skipped on resume: what the journal says was written (a kill between a file's rename and its
    # journal line leaves a file that is made again, identically).
    journalled = [json.loads(line) for line in (killed / PROGRESS).read_text().splitlines() if line.endswith("}")]
    done = {r["id"] for r in journalled if r.get("status") == "ok"}
    assert done and done <= {p[:-4] for p in partial}
    proc = voicespec("synth", str(src), "-o", str(killed), *common, "--resume", check=False)
    assert proc.returncode == 1
    assert _wavs(killed) == expected
    resumed = json.loads((killed / "summary.json").read_text())
    assert resumed["skipped"] == len(done) and resumed["ok"] == len(expected) - len(done)
    for p in killed.glob("*.wav"):
        info = sf.info(str(p))
        assert info.frames > 0 and info.samplerate == 24000


def test_generate_engine_only_greedy_matches_plain(tiny_voice_dir, tmp_path, capsys):
    common = ["generate", "--model", str(tiny_voice_dir / "target"), "--text-ids", "5,6,7,8", "--temperature", "0",
              "--max-steps", "60"]
    plain, spec = tmp_path / "plain.json", tmp_path / "spec.json"
    assert main([*common, "--no-spec", "--drafter", "draft-model", "--dump-tokens", str(plain)]) == 0  # no draft needed
    assert main([*common, "--drafter", "draft-model", "--draft-model", str(tiny_voice_dir / "drafters" / "draft-model"),
                 "--gamma", "3", "--dump-tokens", str(spec)]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 2 and all("mean accepted length" in line for line in out)
    a, b = json.loads(plain.read_text()), json.loads(spec.read_text())
    assert a["frames"] == b["frames"] and len(a["frames"]) == 4
    assert b["stats"]["drafted"] > 0 and a["stats"]["drafted"] == 0


def test_draft_model_needs_a_path(tmp_path, capsys):
    assert main(["generate", "--model", str(tmp_path), "--text-ids", "1", "--drafter", "draft-model"]) == 2
    assert capsys.readouterr().err.strip() == ("voicespec: error: drafter 'draft-model' needs --draft-model DIR "
                                               "(a model folder)")


def test_a_missing_extra_or_a_bug_is_one_line(monkeypatch, capsys):
    from voicespec.cli import commands

    def missing(args):
        raise ImportError("the judge needs PocketSphinx: pip install -e '.[eval]'")

    def bug(args):
        raise KeyError("oops")

    monkeypatch.setattr(commands, "cmd_tiny", missing)
    assert main(["tiny", "--out", "x"]) == 2
    assert capsys.readouterr().err.strip() == "voicespec: error: the judge needs PocketSphinx: pip install -e '.[eval]'"
    monkeypatch.setattr(commands, "cmd_tiny", bug)
    assert main(["tiny", "--out", "x"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error (KeyError: 'oops')" in err[0] and "VOICESPEC_DEBUG" in err[0]
    monkeypatch.setenv("VOICESPEC_DEBUG", "1")
    with pytest.raises(KeyError):
        main(["tiny", "--out", "x"])
