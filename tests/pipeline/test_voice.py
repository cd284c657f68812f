"""Voice folders: clear errors for a missing, inconsistent or corrupt folder, and parts that must
agree about the frame-aligned track."""

from __future__ import annotations

import json
import shutil

import pytest

from voicespec.pipeline.voice import Voice


def test_voice_folder_checks(tiny_voice_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="not a voice folder"):
        Voice.load(tmp_path)
    bad = tmp_path / "bad"
    shutil.copytree(tiny_voice_dir, bad)
    cfg = json.loads((bad / "voice.json").read_text())
    cfg["tokenizer"]["alphabet"] = "".join(chr(0x100 + i) for i in range(200))
    (bad / "voice.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="text vocabulary"):
        Voice.load(bad)
    codec_cfg = json.loads((bad / "codec" / "config.json").read_text())
    (bad / "codec" / "model.safetensors").write_bytes(b"\x00" * 100)
    with pytest.raises(ValueError, match="corrupt"):
        Voice.load(bad)
    assert codec_cfg["n_codebooks"] == 4


def test_voice_parts_must_agree_about_the_track(aligned_voice, tiny_voice):
    with pytest.raises(ValueError, match="needs a duration predictor"):
        Voice(aligned_voice.config, aligned_voice.codec, aligned_voice.target, {}, None)
    with pytest.raises(ValueError, match="takes no track"):
        Voice(tiny_voice.config, tiny_voice.codec, tiny_voice.target, {}, aligned_voice.duration)

