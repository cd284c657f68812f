"""``voicespec say``: text from stdin, audio to stdout, --format, --speed, no folders made."""

from __future__ import annotations

import io
import sys

import pytest
import soundfile as sf

from voicespec.cli import main


def test_text_from_stdin_audio_to_stdout_is_the_file_say_writes(tiny_voice_dir, tmp_path, monkeypatch, capsysbinary):
    common = ["--model", str(tiny_voice_dir), "--seed", "3"]
    assert main(["say", "Good morning.", "-o", str(tmp_path / "a.wav"), *common]) == 0
    capsysbinary.readouterr()
    monkeypatch.setattr(sys, "stdin", io.StringIO("Good morning."))
    assert main(["say", "-", "-o", "-", *common]) == 0
    out, err = capsysbinary.readouterr()
    assert out == (tmp_path / "a.wav").read_bytes()  # the audio, nothing else: wav by default
    lines = err.decode().strip().splitlines()
    assert len(lines) == 1 and "RTF" in lines[0]  # the summary went to stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.wav"]


def test_omitted_text_is_read_from_a_pipe_in_the_format_asked(tiny_voice_dir, monkeypatch, capsysbinary):
    monkeypatch.setattr(sys, "stdin", io.StringIO("Hello there, how are you?\n"))
    assert main(["say", "-o", "-", "--format", "flac", "--model", str(tiny_voice_dir)]) == 0
    out = capsysbinary.readouterr().out
    assert out.startswith(b"fLaC")
    info = sf.info(io.BytesIO(out))
    assert info.format == "FLAC" and info.frames > 0


def test_omitted_text_with_a_terminal_on_stdin_is_an_error(terminal_stream, tiny_voice_dir, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", terminal_stream())
    assert main(["say", "-o", "x.wav", "--model", str(tiny_voice_dir)]) == 2
    assert capsys.readouterr().err.strip() == "voicespec: error: say needs TEXT (or '-' to read it from stdin)"


def test_audio_is_not_written_to_a_terminal(terminal_stream, tiny_voice_dir, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdout", terminal_stream())
    assert main(["say", "hi", "-o", "-", "--model", str(tiny_voice_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("voicespec: error: refusing to write audio to a terminal") and "-o FILE" in err


@pytest.mark.parametrize("name,fmt,expected", [("x.mp3", None, "MP3"), ("x.ogg", "ogg", "OGG"),
                                               ("speech.audio", "ogg", "OGG"), ("noext", "flac", "FLAC")])
def test_format_by_extension_or_by_flag(tiny_voice_dir, tmp_path, name, fmt, expected):
    out = tmp_path / name
    assert main(["say", "Hi.", "-o", str(out), "--model", str(tiny_voice_dir),
                 *(["--format", fmt] if fmt else [])]) == 0
    assert sf.info(str(out)).format == expected
    assert [p.name for p in tmp_path.iterdir()] == [name]


def test_a_missing_folder_is_named_and_not_made(tiny_voice_dir, tmp_path, capsys):
    out = tmp_path / "no" / "such" / "x.wav"
    assert main(["say", "Hi.", "-o", str(out), "--model", str(tiny_voice_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"voicespec: error: {out.parent}: no such folder") and not (tmp_path / "no").exists()
    (tmp_path / "file").write_text("")
    assert main(["say", "Hi.", "-o", str(tmp_path / "file" / "x.wav"), "--model", str(tiny_voice_dir)]) == 2
    assert f"{tmp_path / 'file'}: is not a folder" in capsys.readouterr().err


@pytest.mark.slow
def test_speed_shortens_the_audio_of_a_voice_with_durations(aligned_voice_dir, tmp_path):
    lengths = {}
    for speed in ("1", "2"):
        out = tmp_path / f"{speed}.wav"
        assert main(["say", "Hello there, my friend.", "-o", str(out), "--model", str(aligned_voice_dir),
                     "--seed", "1", "--speed", speed]) == 0
        lengths[speed] = sf.info(str(out)).frames
    assert 0 < lengths["2"] < 0.75 * lengths["1"]
