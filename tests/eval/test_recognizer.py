"""The CTC recognizer: greedy decoding, 50 Hz features on codec frames, padding-independent batches,
and clear errors for bad folders."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from voicespec.codec.config import CodecConfig

from voicespec.codec.model import Codec
from voicespec.eval.recognizer import CtcAsr, greedy_ids
from voicespec.frontend.text import DEFAULT_ALPHABET, CharTokenizer

TOK = CharTokenizer()


def test_greedy_decode_collapses_repeats_and_drops_blanks(one_hot_log_probs):
    a, b, space = TOK.encode("a")[0], TOK.encode("b")[0], TOK.encode(" ")[0]
    frames = [0, a, a, 0, a, b, b, 0, 0, space, space, b, 0]
    assert TOK.decode(greedy_ids(one_hot_log_probs(frames))) == "aab b"
    assert greedy_ids(one_hot_log_probs([0, 0, 0])) == []


def test_features_are_50_hz_and_centred_on_codec_frames(tiny_asr_config):
    torch.manual_seed(0)
    model = CtcAsr(tiny_asr_config)
    assert model.config.frame_rate == 50
    # ceil(N / 320): 1 s is 50 frames; a partial last hop is kept as a frame, as Codec.encode does.
    for n, frames in [(16000, 50), (16001, 51), (15999, 50), (320, 1), (1, 1), (0, 0)]:
        assert model.features(torch.zeros(1, n))[0].shape == (1, 80, frames)
    click = torch.zeros(1, 16000)
    click[0, 320 * 10 + 160] = 1.0  # the middle of codec frame 10
    energy = model.log_mel(click)[0].exp().sum(0)
    assert int(energy.argmax()) == 10
    # A 24 kHz second is resampled to 16 kHz: still 50 frames.
    assert model.log_probs(torch.zeros(24000), 24000).shape == (50, len(DEFAULT_ALPHABET) + 1)
    # The same count as a 16 kHz codec with hop 320 (the recipe's) gives, so frames map 1:1.
    codec = Codec.random(CodecConfig(sample_rate=16000, n_filters=2, ratios=(8, 5, 4, 2), dimension=4, lstm=0,
                                     pad_mode="constant", n_q=1, n_codebooks=1, codebook_size=2))
    for n in (16000, 16001, 4000):
        assert codec.encode(torch.zeros(n)).shape[1] == model.features(torch.zeros(1, n))[0].shape[-1]


@pytest.mark.parametrize("encoder", ["gru", "transformer"])
def test_padding_in_a_batch_does_not_change_an_utterance(encoder, tiny_asr_config):
    torch.manual_seed(0)
    model = CtcAsr(replace(tiny_asr_config, encoder=encoder, conv_layers=2)).eval()
    short, long = 0.1 * torch.randn(5000), 0.1 * torch.randn(9000)
    batch = torch.zeros(2, 9000)
    batch[0, :5000], batch[1] = short, long
    with torch.no_grad():
        feats, frames = model.features(batch, torch.tensor([5000, 9000]))
        out = model(feats, frames)
    assert frames.tolist() == [16, 29]
    assert torch.allclose(out[0, :16], model.log_probs(short, 16000), atol=1e-5)
    assert torch.allclose(out[1], model.log_probs(long, 16000), atol=1e-5)


def test_bad_folders_give_clear_errors(tmp_path, tiny_asr_config):
    with pytest.raises(FileNotFoundError, match="not a voicespec ASR folder"):
        CtcAsr.from_folder(tmp_path / "missing")
    good = tmp_path / "good"
    CtcAsr(tiny_asr_config).save(good)
    assert CtcAsr.from_folder(good).config == tiny_asr_config

    bad = tmp_path / "bad"
    CtcAsr(tiny_asr_config).save(bad)
    (bad / "model.safetensors").write_bytes((bad / "model.safetensors").read_bytes()[:100])
    with pytest.raises(ValueError, match="corrupt or incompatible"):
        CtcAsr.from_folder(bad)
    (bad / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="invalid JSON"):
        CtcAsr.from_folder(bad)
    (bad / "config.json").write_text(json.dumps({"codec_type": "voicespec_encodec"}))
    with pytest.raises(ValueError, match="not a voicespec ASR config"):
        CtcAsr.from_folder(bad)
    (bad / "config.json").write_text(json.dumps({**tiny_asr_config.to_dict(), "hidden": 32}))  # weights of another size
    (bad / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes())
    with pytest.raises(ValueError, match="corrupt or incompatible"):
        CtcAsr.from_folder(bad)

