"""``voicespec synth``: failures listed with their reasons, journalled and retried on --resume,
a progress bar only on a terminal, and a per-line ``speed``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import soundfile as sf

from voicespec.batch import PROGRESS, SUMMARY, BadLine, BatchConfig, failure_lines, parse_line, run_batch
from voicespec.cli import main


def write_jsonl(path: Path, lines: list) -> Path:
    path.write_text("".join((json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines))
    return path


def journal(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / PROGRESS).read_text().splitlines()]


def test_failures_are_listed_with_their_reasons_on_stderr(tiny_voice_dir, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", [
        {"id": "a", "text": "Fine."},
        {"id": "b", "text": "   "},
        "not json",
        {"id": "d", "text": "Too fast.", "speed": 5},
        {"id": "e", "text": "Who?", "voice": str(tmp_path / "nowhere")},
    ])
    out = tmp_path / "out"
    assert main(["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines() == [captured.out.strip()] and "1 written" in captured.out
    err = captured.err.strip().splitlines()
    assert err[0] == "4 failed:"
    assert err[1].startswith("  b (line 2): text is empty")
    assert err[2].startswith("  line 3: invalid JSON")
    assert err[3] == "  d (line 4): speed must be a number in [0.5, 2] (1 = the voice's own pace), got 5"
    assert err[4] == f"  e (line 5): {tmp_path / 'nowhere'}: no such voice folder"
    assert len(err) == 5  # no progress bar: stderr is not a terminal
    failed = [r for r in journal(out) if r["status"] == "failed"]
    assert [r.get("id") for r in failed] == ["b", None, "d", "e"] and all(r["error"] for r in failed)


def test_a_long_failure_list_is_cut_short(tiny_voice_dir, tmp_path, capsys):
    src = write_jsonl(tmp_path / "in.jsonl", ["{broken"] * 23)
    out = tmp_path / "out"
    assert main(["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0] == "23 failed:" and len(err) == 22
    assert err[20].startswith("  line 20: invalid JSON")
    assert err[21] == f"  ... and 3 more (see {out / SUMMARY})"
    assert len(json.loads((out / SUMMARY).read_text())["failures"]) == 23


def test_failure_lines_say_nothing_when_nothing_failed():
    assert failure_lines({"failures": []}, "s.json") == []
    summary = {"failures": [{"id": "x", "line": 1, "error": "boom"}, {"line": 2, "error": "bad"}]}
    assert failure_lines(summary, "s.json", limit=1) == ["2 failed:", "  x (line 1): boom", "  ... and 1 more (see s.json)"]


@pytest.mark.slow
def test_resume_retries_failures_and_skips_only_what_was_written(tiny_voice_dir, tmp_path):
    later = tmp_path / "later-voice"  # missing on the first run: b fails, and is retried once it exists
    src = write_jsonl(tmp_path / "in.jsonl", [
        {"id": "a", "text": "First one."},
        {"id": "b", "text": "Second one.", "voice": str(later)},
        {"id": "c", "text": "Third one."},
        {"id": "d", "text": "Fourth one."},
    ])
    out = tmp_path / "out"
    args = ["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir)]
    assert main(args) == 1
    assert [(r["id"], r["status"]) for r in journal(out)] == [("a", "ok"), ("b", "failed"), ("c", "ok"), ("d", "ok")]
    a_before = (out / "a.wav").stat().st_mtime_ns
    shutil.copytree(tiny_voice_dir, later)
    (out / "c.wav").unlink()  # written, then lost: made again
    (out / "b.wav").write_bytes(b"not audio")  # a file the journal never vouched for: made again
    assert main([*args, "--resume"]) == 0
    summary = json.loads((out / SUMMARY).read_text())
    assert {r["id"]: r["status"] for r in summary["records"]} == {"a": "skipped", "b": "ok", "c": "ok", "d": "skipped"}
    assert (out / "a.wav").stat().st_mtime_ns == a_before
    for name in "abcd":
        assert sf.info(str(out / f"{name}.wav")).frames > 0
    assert [(r["id"], r["status"]) for r in journal(out)][4:] == [("b", "ok"), ("c", "ok")]  # appended
    assert main(["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir), "--resume", "--format", "flac"]) == 0
    assert json.loads((out / SUMMARY).read_text())["skipped"] == 0  # the journal's wav files are not flac ones


@pytest.mark.slow
def test_speed_per_line_and_for_the_run(aligned_voice_dir, tmp_path, capsys):
    text = "Hello there, my friend."
    src = write_jsonl(tmp_path / "in.jsonl", [
        {"id": "own", "text": text, "seed": 1, "speed": 1},
        {"id": "fast", "text": text, "seed": 1, "speed": 2.0},
        {"id": "run", "text": text, "seed": 1},
        {"id": "bad", "text": text, "speed": "quick"},
    ])
    out = tmp_path / "out"
    assert main(["synth", str(src), "-o", str(out), "--model", str(aligned_voice_dir), "--speed", "0.5"]) == 1
    frames = {p.stem: sf.info(str(p)).frames for p in out.glob("*.wav")}
    assert sorted(frames) == ["fast", "own", "run"]
    assert frames["fast"] < 0.75 * frames["own"] and frames["run"] > 1.5 * frames["own"]
    assert "bad (line 4): speed must be a number" in capsys.readouterr().err


def test_the_speed_key_is_checked_like_the_other_options():
    assert isinstance(parse_line('{"id": "x", "text": "hi", "speed": 2.5}', 1, jsonl=True), BadLine)
    assert isinstance(parse_line('{"id": "x", "text": "hi", "speed": true}', 1, jsonl=True), BadLine)
    assert parse_line('{"id": "x", "text": "hi", "speed": 1.25}', 1, jsonl=True).speed == 1.25
    assert parse_line('{"id": "x", "text": "hi"}', 1, jsonl=True).speed is None


def _bad_lines_run(tmp_path, **kw) -> None:
    from voicespec.pipeline.synthesis import SynthesisOptions

    def no_synthesis(name):
        raise AssertionError("bad lines need no voice")

    items = [BadLine(i, "bad") for i in range(1, 6)]
    run_batch(items, BatchConfig(tmp_path / "out", SynthesisOptions(), **kw), no_synthesis)


def test_no_bar_off_a_terminal_but_a_line_every_few_items(tmp_path, capsys):
    _bad_lines_run(tmp_path, report_every=2)
    assert capsys.readouterr().err.splitlines() == ["synth: 2/5 items, 2 failed", "synth: 4/5 items, 4 failed"]
    _bad_lines_run(tmp_path, report_every=0)
    assert capsys.readouterr().err == ""


def test_a_bar_on_a_terminal(terminal_stream, tmp_path, monkeypatch):
    stderr = terminal_stream()
    monkeypatch.setattr(sys, "stderr", stderr)
    _bad_lines_run(tmp_path, report_every=2)
    assert "5/5" in stderr.getvalue() and "utt" in stderr.getvalue() and "synth:" not in stderr.getvalue()
