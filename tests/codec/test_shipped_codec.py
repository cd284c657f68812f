"""The codec we ship (models/voicespec-tiny/codec): loads, round-trips held-out speech within the
metrics its model card states, and streams exactly."""

from __future__ import annotations

import pytest
import soundfile as sf
import torch

from voicespec.codec.model import Codec
from voicespec.paths import SAMPLES_DIR, SHIPPED_VOICES_DIR
from voicespec.train.codec import MelLoss

CODEC_DIR = SHIPPED_VOICES_DIR / "voicespec-tiny" / "codec"
CLIPS = sorted(SAMPLES_DIR.glob("codec-*-teacher.wav"))


@pytest.fixture(scope="module")
def codec() -> Codec:
    return Codec.from_folder(CODEC_DIR)


def test_shipped_codec_is_what_the_card_says(codec):
    card = (CODEC_DIR / "MODEL_CARD.md").read_text()
    extra = codec.config.extra
    assert codec.sample_rate == 16000 and codec.frame_rate == 50 and codec.n_codebooks == 4
    assert extra["training"]["steps"] > 0 and "stoi" in extra["heldout_metrics"]
    assert f"{extra['training']['steps']}" in card and "CC0" in card


@pytest.mark.parametrize("clip", CLIPS, ids=[c.stem for c in CLIPS])
def test_heldout_round_trip_within_stated_metrics(codec, clip):
    pystoi = pytest.importorskip("pystoi")
    audio, sr = sf.read(str(clip), dtype="float32")
    assert sr == codec.sample_rate
    x = torch.from_numpy(audio)
    y = codec.decode(codec.encode(x))[: x.shape[0]]
    stated = codec.config.extra["heldout_metrics"]
    mel = float(MelLoss(codec.sample_rate).log_mel_l1(y[None], x[None]))
    stoi = pystoi.stoi(audio, y.numpy(), sr)
    # One clip varies around the held-out mean the card states.
    assert mel <= 1.5 * stated["log_mel_l1"]
    assert stoi >= stated["stoi"] - 0.1


def test_shipped_codec_streams_exactly(codec):
    assert CLIPS, "samples/ must hold the held-out teacher clips"
    audio, _ = sf.read(str(CLIPS[0]), dtype="float32")
    codes = codec.encode(torch.from_numpy(audio))
    full = codec.decode(codes)
    dec = codec.streaming_decoder()
    chunks = [dec.push(codes[:, i : i + 3]) for i in range(0, codes.shape[1], 3)] + [dec.flush()]
    streamed = torch.cat(chunks)
    assert streamed.shape == full.shape and torch.allclose(streamed, full, atol=2e-6)
