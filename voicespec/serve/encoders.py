"""The bytes a context's audio goes out as: one encoder per context, fed its PCM chunk by chunk.

Sample-wise encodings (PCM, G.711) keep no state: every chunk is whole samples. Opus does: it
codes 20 ms frames with look-ahead, so an :class:`OpusEncoder` holds back what does not yet fill a
frame and hands out Ogg pages as they complete (one page per 20 ms, so the stream stays live);
``finish`` flushes the tail and closes the Ogg stream. Concatenated, a context's payloads are one
valid ``.opus`` file. PyAV (FFmpeg's libopus) does the coding: the ``serve`` extra.
"""

from __future__ import annotations

import importlib.util
from typing import Protocol

import numpy as np
import torch

from voicespec.audio import to_encoding

OPUS_PAGE_US = 20_000  # an Ogg page per Opus frame: latency over a few bytes of page headers
OPUS_BITRATE = 32_000  # speech at 24 kbit/s and up is transparent enough for a voice agent


class Encoder(Protocol):
    def encode(self, pcm: torch.Tensor) -> bytes: ...

    def finish(self) -> bytes: ...


class SampleEncoder:
    """PCM or G.711: each chunk on its own (:func:`voicespec.audio.to_encoding`)."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding

    def encode(self, pcm: torch.Tensor) -> bytes:
        return to_encoding(pcm, self.encoding)

    def finish(self) -> bytes:
        return b""


class _Sink:
    """Where the Ogg muxer writes: bytes are taken as they come (no seeking: a live stream)."""

    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def write(self, data: bytes) -> int:
        self.chunks.append(bytes(data))
        return len(data)

    def take(self) -> bytes:
        data, self.chunks = b"".join(self.chunks), []
        return data


class OpusEncoder:
    """Mono float PCM at ``sample_rate`` (an Opus rate) to an Ogg Opus byte stream."""

    def __init__(self, sample_rate: int, bitrate: int = OPUS_BITRATE) -> None:
        check_available("opus")
        import av

        self._av = av
        self._sink = _Sink()
        self._out = av.open(self._sink, "w", format="ogg", options={"page_duration": str(OPUS_PAGE_US)})
        self._stream = self._out.add_stream("libopus", rate=sample_rate, layout="mono")
        self._stream.bit_rate = bitrate
        self._stream.options = {"application": "voip", "frame_duration": "20"}
        self._rate = sample_rate
        self._pts = 0

    def encode(self, pcm: torch.Tensor) -> bytes:
        x = np.clip(np.nan_to_num(pcm.detach().cpu().numpy().astype(np.float32)), -1.0, 1.0)
        if x.size:
            frame = self._av.AudioFrame.from_ndarray(x[None, :], format="flt", layout="mono")
            frame.sample_rate, frame.pts = self._rate, self._pts
            self._pts += x.size
            for packet in self._stream.encode(frame):
                self._out.mux(packet)
        return self._sink.take()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._out.mux(packet)
        self._out.close()  # writes the last page (end of stream)
        return self._sink.take()


def check_available(encoding: str) -> None:
    """ImportError (what to install) if ``encoding`` needs a library this install lacks."""
    if encoding == "opus" and importlib.util.find_spec("av") is None:
        raise ImportError("opus output needs PyAV: pip install 'voicespec[serve]'")


def make_encoder(encoding: str, sample_rate: int) -> Encoder:
    return OpusEncoder(sample_rate) if encoding == "opus" else SampleEncoder(encoding)
