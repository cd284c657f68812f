"""Voice folders: clear errors for a missing, inconsistent or corrupt folder, and parts that must
agree about the frame-aligned track."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import pytest
import torch

from voicespec.pipeline.voice import Voice
from voicespec.serve.config import ServerConfig


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


@pytest.mark.parametrize("first,most", [(0, None), (2, 1), (2.5, None), (True, 4), (2, "8")])
def test_codec_blocks_are_checked_when_the_voice_loads(tiny_voice, first, most):
    config = dataclasses.replace(tiny_voice.config, codec_chunk_frames=first, codec_chunk_max_frames=most)
    with pytest.raises(ValueError, match="codec_chunk_frames / codec_chunk_max_frames"):
        Voice(config, tiny_voice.codec, tiny_voice.target, {})


def test_a_greedy_voice_samples_with_its_own_settings_when_asked(tiny_voice):
    """``decoding: greedy``: argmax by default; a request for a temperature, an evaluation's sampled
    rows and a benchmark's sampling mode sample with the rest of the voice's ``sampling``."""
    from voicespec.serve.requests import Asked, request_options

    config = dataclasses.replace(tiny_voice.config, sampling={"temperature": 0.7, "top_k": 50}, decoding="greedy")
    voice = Voice(config, tiny_voice.codec, tiny_voice.target, {})
    assert (voice.sampling.temperature, voice.sampling.top_k) == (0, 50) and voice.sampling.greedy
    assert (voice.sampled.temperature, voice.sampled.top_k) == (0.7, 50)
    asked = request_options(voice, ServerConfig(), Asked(sampling={"temperature": 0.9})).decode.sampling
    assert (asked.temperature, asked.top_k) == (0.9, 50)
    sampled = Voice(dataclasses.replace(config, decoding="sampled"), tiny_voice.codec, tiny_voice.target, {})
    assert sampled.sampling == sampled.sampled == voice.sampled
    for bad in ("argmax", None, ["greedy"]):
        with pytest.raises(ValueError, match="decoding must be one of sampled, greedy"):
            Voice(dataclasses.replace(config, decoding=bad), tiny_voice.codec, tiny_voice.target, {})


def test_voice_parts_must_agree_about_the_track(aligned_voice, tiny_voice):
    with pytest.raises(ValueError, match="needs a duration predictor"):
        Voice(aligned_voice.config, aligned_voice.codec, aligned_voice.target, {}, None)
    with pytest.raises(ValueError, match="takes no track"):
        Voice(tiny_voice.config, tiny_voice.codec, tiny_voice.target, {}, aligned_voice.duration)


def test_a_voice_may_share_a_sibling_voices_codec(tiny_voice_dir, tmp_path, monkeypatch):
    """voice.json's "codec" names the codec folder relative to the voice's, so a second voice can
    speak through the first one's decoder (and a new decoder shipped there serves both)."""
    from voicespec.serve.voices import describe_folder

    first, second = tmp_path / "first", tmp_path / "second"
    shutil.copytree(tiny_voice_dir, first)
    shutil.copytree(tiny_voice_dir, second, ignore=shutil.ignore_patterns("codec"))
    cfg = json.loads((second / "voice.json").read_text())
    (second / "voice.json").write_text(json.dumps({**cfg, "codec": "../first/codec"}))
    a, b = Voice.load(first), Voice.load(second)
    assert b.codec is a.codec  # loaded once while either voice is loaded
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert Voice.load(first, device="auto").codec is a.codec  # "auto" is the CPU here: the same copy
    weights = first / "codec" / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # changed on disk: loaded anew
    renewed = Voice.load(second).codec
    assert renewed is not a.codec
    assert all(torch.equal(x, y) for x, y in zip(a.codec.model.state_dict().values(), renewed.model.state_dict().values()))
    monkeypatch.setenv("VOICESPEC_VOICES", str(tmp_path))
    assert describe_folder("second")["sample_rate"] == a.codec.sample_rate
    Voice.copy_folder(second, tmp_path / "elsewhere" / "copy")  # still names the first voice's codec
    assert json.loads((tmp_path / "elsewhere" / "copy" / "voice.json").read_text())["codec"] == "../../first/codec"
    assert Voice.load(tmp_path / "elsewhere" / "copy").codec.sample_rate == a.codec.sample_rate
    (tmp_path / "link").symlink_to(tmp_path)  # copied from a path through a symlink: still the first's codec
    Voice.copy_folder(tmp_path / "link" / "second", tmp_path / "via-link")
    assert Voice.load(tmp_path / "via-link").codec.sample_rate == a.codec.sample_rate
    shutil.rmtree(first / "codec")
    with pytest.raises(FileNotFoundError, match="first/codec"):
        Voice.load(second)
