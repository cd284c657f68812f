"""The streamed encodings: G.711 as the ITU/Sun reference codes it, Opus as one live Ogg stream."""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
import soundfile as sf
import torch

from voicespec.audio import to_encoding, to_int16
from voicespec.serve.encoders import ContainerEncoder, make_encoder

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
    enc = ContainerEncoder("opus", rate)
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


@pytest.mark.parametrize("fmt", ["mp3", "aac", "flac"])
def test_mp3_aac_and_flac_stream_as_they_go_and_decode_to_the_signal(fmt):
    """The OpenAI endpoint's compressed formats, fed 20 ms chunks: MP3 and AAC bytes leave before
    the end (a live stream), and FFmpeg's decoder gives the signal back (FLAC: sample for sample)."""
    av = pytest.importorskip("av")
    rate = 24000
    x = 0.3 * torch.sin(2 * torch.pi * 440 * torch.arange(2 * rate) / rate)
    enc = make_encoder(fmt, rate)
    hop = rate // 50
    parts = [enc.encode(x[i:i + hop]) for i in range(0, len(x), hop)]
    data = b"".join(parts) + enc.finish()
    if fmt != "flac":  # FLAC comes whole, its header completed (libsndfile reads its length)
        assert sum(map(len, parts)) > len(data) // 2  # most bytes went out while the audio was still coming
    else:
        assert not any(parts) and sf.info(io.BytesIO(data)).frames == len(x)
    with av.open(io.BytesIO(data)) as container:
        y = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]).astype(np.float64)
        assert container.streams.audio[0].sample_rate == rate
    if fmt == "flac":
        assert np.array_equal(y, to_int16(x))  # the 16-bit samples a WAV file of the same audio holds
        return
    lag = int(np.argmax(np.correlate(y[: rate // 2], x.numpy()[: rate // 4], "valid")))  # the encoder's delay
    ref = x.numpy()[: len(y) - lag]
    snr = 10 * np.log10(np.sum(ref ** 2) / np.sum((ref - y[lag: lag + len(ref)]) ** 2))
    assert lag < 4096 and snr > 15
