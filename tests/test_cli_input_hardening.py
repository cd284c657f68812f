"""Issue 39, defect 2 (command line): input that is not UTF-8 text is a clear error, never babble.

``say`` read stdin in the locale's encoding with surrogate escapes, so Latin-1 bytes failed deep
in the front end ("'utf-8' codec can't encode character '\\udccb'"); ``synth`` read its file with
``errors="replace"``, so a binary file was spoken as 90 s of babble and exited 0. Now ``say``
names the first bad byte in one line (exit 2), and each ``synth`` line that is not UTF-8 text (or
holds control bytes) is a bad line, recorded like any other, and fails the run.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from voicespec.batch import PROGRESS, SUMMARY
from voicespec.cli import main

BAD_LINE = re.compile(r"line is not UTF-8 text \(byte 0x[0-9a-f]{2} at offset \d+\)"
                      r"|line holds a control character, not text \(byte 0x[0-9a-f]{2} at offset \d+\)")


def voicespec(*args: str | bytes, stdin: bytes = b"", cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real command, in a UTF-8 locale (argv bytes that are not UTF-8 arrive as surrogate escapes)."""
    env = {**os.environ, "LC_ALL": "C.UTF-8", "OMP_NUM_THREADS": "1"}
    env.pop("VOICESPEC_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "voicespec", *args], input=stdin, capture_output=True, env=env,
                          cwd=cwd, timeout=300)


@pytest.mark.slow
def test_say_names_the_first_byte_of_stdin_that_is_not_utf8(tiny_voice_dir, tmp_path):
    """The probe: ``printf 'Caf\\xe9' | voicespec say - -o x.wav``."""
    out = tmp_path / "x.wav"
    r = voicespec("say", "-", "-o", str(out), "--model", str(tiny_voice_dir), stdin=b"Caf\xe9")
    assert r.returncode == 2, r.stderr
    assert r.stderr.decode().strip() == "voicespec: error: standard input is not UTF-8 text (byte 0xe9 at offset 3)"
    assert not out.exists()


@pytest.mark.slow
def test_say_names_the_first_byte_of_a_text_argument_that_is_not_utf8(tiny_voice_dir, tmp_path):
    out = tmp_path / "x.wav"
    r = voicespec("say", b"Na\xefve caf\xe9.", "-o", str(out), "--model", str(tiny_voice_dir))
    assert r.returncode == 2, r.stderr
    assert r.stderr.decode().strip() == "voicespec: error: TEXT is not UTF-8 text (byte 0xef at offset 2)"
    assert not out.exists()


def test_say_reports_a_lone_surrogate_in_its_text_in_one_line(tiny_voice_dir, tmp_path, capsys):
    out = tmp_path / "x.wav"
    assert main(["say", "Hi \ud800 x.", "-o", str(out), "--model", str(tiny_voice_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and err.startswith("voicespec: error: text holds a lone surrogate U+D800")
    assert "offset 3" in err and not out.exists()


def test_synth_of_a_binary_file_speaks_nothing_and_fails(tiny_voice_dir, tmp_path, capsys):
    """The probe: ``voicespec synth garbage.bin -o g/`` on random bytes: every line a bad line."""
    src = tmp_path / "garbage.bin"
    src.write_bytes(random.Random(39).randbytes(4096))
    out = tmp_path / "g"
    assert main(["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir)]) == 1
    summary = json.loads((out / SUMMARY).read_text())
    assert summary["ok"] == 0 and summary["failed"] == summary["items"] > 10 and summary["audio_s"] == 0
    for rec in summary["failures"]:  # the bad-line schema: no id, its line, why
        assert set(rec) == {"line", "status", "error"} and BAD_LINE.fullmatch(rec["error"]), rec
    assert not list(out.glob("*.wav"))
    assert "0 written" in capsys.readouterr().out


def test_synth_records_each_line_that_is_not_text_and_speaks_the_rest(tiny_voice_dir, tmp_path, capsys):
    """Bad bytes fail their own line only; line numbers count CRLF and CR line ends as an editor does."""
    src = tmp_path / "lines.txt"
    src.write_bytes(b"Fine.\r\nCaf\xe9 au lait.\r\nnul\x00byte.\ntab\tis fine.\rescape \x1b[31m red.\n\nok \xff\xfe.\n")
    out = tmp_path / "out"
    assert main(["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir)]) == 1
    records = {r["line"]: r for r in json.loads((out / SUMMARY).read_text())["records"]}
    assert sorted(records) == [1, 2, 3, 4, 5, 7]
    assert records[1]["status"] == records[4]["status"] == "ok"
    assert records[2] == {"line": 2, "status": "failed", "error": "line is not UTF-8 text (byte 0xe9 at offset 3)"}
    assert records[3] == {"line": 3, "status": "failed",
                          "error": "line holds a control character, not text (byte 0x00 at offset 3)"}
    assert records[5]["error"] == "line holds a control character, not text (byte 0x1b at offset 7)"
    assert records[7]["error"] == "line is not UTF-8 text (byte 0xff at offset 3)"
    err = capsys.readouterr().err
    assert "  line 2: line is not UTF-8 text (byte 0xe9 at offset 3)" in err.splitlines()
    assert len([json.loads(x) for x in (out / PROGRESS).read_text().splitlines()]) == 6  # all journalled


def test_synth_jsonl_lines_that_are_not_text_are_bad_lines(tiny_voice_dir, tmp_path):
    """A JSONL line with a raw bad byte is a bad line (no id: it could not be read); one whose
    text escapes a lone surrogate fails its own item with the front end's reason."""
    src = tmp_path / "in.jsonl"
    src.write_bytes(b'{"id": "a", "text": "Fine."}\n{"id": "b", "text": "Caf\xe9."}\n'
                    b'{"id": "c", "text": "x \\ud800 y."}\n')
    out = tmp_path / "out"
    assert main(["synth", str(src), "-o", str(out), "--model", str(tiny_voice_dir)]) == 1
    records = json.loads((out / SUMMARY).read_text())["records"]
    assert [r.get("id") for r in records] == ["a", None, "c"]
    assert records[0]["status"] == "ok"
    assert records[1] == {"line": 2, "status": "failed", "error": "line is not UTF-8 text (byte 0xe9 at offset 24)"}
    assert records[2]["status"] == "failed" and "lone surrogate U+D800" in records[2]["error"]
