"""``decode_rtf``: the streaming codec decoder's real-time factor, measured chunk by chunk."""

from __future__ import annotations

import math

import pytest

from voicespec.bench.codec_rtf import decode_rtf
from voicespec.codec.config import CodecConfig
from voicespec.codec.model import Codec

SMALL = CodecConfig(n_filters=8, ratios=(8, 6, 5, 2), lstm=0, pad_mode="constant", n_q=4, n_codebooks=4, dimension=32)


def test_decode_rtf_reports_sane_numbers():
    codec = Codec.random(SMALL)
    r = decode_rtf(codec, chunk_frames=2, seconds=0.2, repeats=1)
    assert set(r) >= {"chunk_frames", "chunk_ms", "frames", "audio_s", "decode_s", "rtf", "per_chunk_ms",
                      "full_decode_rtf", "warmup_frames", "repeats"}
    assert r["chunk_frames"] == 2 and r["frames"] == 10 and r["warmup_frames"] == 1
    assert r["audio_s"] == pytest.approx(0.2) and r["chunk_ms"] == pytest.approx(40.0)
    for key in ("decode_s", "rtf", "per_chunk_ms", "full_decode_rtf"):
        assert math.isfinite(r[key]) and r[key] > 0
    assert r["rtf"] == pytest.approx(r["decode_s"] / r["audio_s"])
    with pytest.raises(ValueError):
        decode_rtf(codec, chunk_frames=0)

