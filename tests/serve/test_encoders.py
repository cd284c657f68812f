"""The streamed encodings: G.711 as the ITU/Sun reference codes it, Opus as one live Ogg stream."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import soundfile as sf
import torch

from voicespec.audio import to_encoding, to_int16
from voicespec.serve.encoders import OpusEncoder, make_encoder

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    audioop = pytest.importorskip("audioop")


@pytest.mark.parametrize("encoding, decode", [("mulaw", "ulaw2lin"), ("alaw", "alaw2lin")])
def test_g711_is_the_reference_coding_of_every_16_bit_sample(encoding, decode):
    every = torch.arange(-32768, 32768, dtype=torch.float32) / 32767.0  # each int16 value once (and -1 clipped)
    coded = to_encoding(every, encoding)
    assert len(coded) == every.numel()  # one byte per sample
    assert coded == getattr(audioop, {"mulaw": "lin2ulaw", "alaw": "lin2alaw"}[encoding])(to_int16(every).tobytes(), 2)
    back = np.frombuffer(getattr(audioop, decode)(coded, 2), "<i2").astype(np.float64)
    err = np.abs(back - to_int16(every))
    assert err.max() <= 1024 and err[np.abs(to_int16(every)) < 256].max() <= 16  # logarithmic steps: fine near zero


def test_sample_encoders_keep_no_state():
    x = torch.linspace(-1, 1, 100)
    enc = make_encoder("pcm_s16le", 16000)
    assert enc.encode(x[:40]) + enc.encode(x[40:]) + enc.finish() == to_encoding(x, "pcm_s16le")


@pytest.mark.parametrize("rate", [16000, 24000, 48000])
def test_opus_streams_pages_as_it_goes_and_decodes_to_the_signal(rate):
    pytest.importorskip("av")
    t = torch.arange(rate) / rate
    x = 0.3 * torch.sin(2 * torch.pi * 440 * t)
    enc = OpusEncoder(rate)
    hop = rate // 50  # 20 ms chunks, as the server sends them
    parts = [enc.encode(x[i:i + hop]) for i in range(0, len(x), hop)]
    tail = enc.finish()
    assert sum(bool(p) for p in parts) >= len(parts) - 3  # a page per 20 ms: live, not held to the end
    data = b"".join(parts) + tail
    assert data[:4] == b"OggS"
    y, sr = sf.read(io.BytesIO(data), dtype="float32")  # libsndfile's own Opus decoder: an independent reader
    assert sr == rate and abs(len(y) - len(x)) <= hop
    n = min(len(x), len(y))
    snr = 10 * np.log10(np.sum(x.numpy()[:n] ** 2) / np.sum((x.numpy()[:n] - y[:n]) ** 2))
    assert snr > 10  # coded speech-band tone, aligned (the encoder's pre-skip is undone)
