"""The bytes a context's audio goes out as: one encoder per context, fed its PCM chunk by chunk.

Sample-wise encodings (PCM, G.711) keep no state: every chunk is whole samples. Opus does: it
codes 20 ms frames with look-ahead, so a :class:`ContainerEncoder` holds back what does not yet fill a
frame and hands out Ogg pages as they complete (one page per 20 ms, so the stream stays live);
``finish`` flushes the tail and closes the Ogg stream. Concatenated, a context's payloads are one
valid ``.opus`` file. MP3 and AAC (ADTS) stream the same way; FLAC comes whole at the end. PyAV (FFmpeg) does the
coding: the ``serve`` extra.
"""

from __future__ import annotations

import importlib.util
import io
import struct
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from voicespec.audio import to_encoding, to_int16

OPUS_PAGE_US = 20_000
OPUS_BITRATE = 32_000


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


@dataclass(frozen=True)
class Container:
    """A compressed format as PyAV (FFmpeg) writes it to a stream: muxer, codec and settings."""

    muxer: str
    codec: str
    bitrate: int | None = None
    muxer_options: tuple[tuple[str, str], ...] = ()
    codec_options: tuple[tuple[str, str], ...] = ()
    lossless: bool = False  # fed our own 16-bit samples (to_int16), so it decodes to what a WAV holds
    whole: bool = False  # written to a seekable buffer and handed out at the end: its header holds the length


# Opus: an Ogg page per Opus frame (latency over a few bytes of page headers); speech at 24 kbit/s
# and up is transparent enough for a voice agent. The others are the OpenAI endpoint's formats.
CONTAINERS = {
    "opus": Container("ogg", "libopus", OPUS_BITRATE, (("page_duration", str(OPUS_PAGE_US)),),
                      (("application", "voip"), ("frame_duration", "20"))),
    "mp3": Container("mp3", "libmp3lame", 64_000),
    "aac": Container("adts", "aac", 64_000),
    # FLAC's header holds the length and a checksum, which the muxer can only write by seeking back:
    # streamed, readers such as libsndfile take the length as unknown and fail.
    "flac": Container("flac", "flac", lossless=True, whole=True),
}


class ContainerEncoder:
    """Mono float PCM at ``sample_rate`` to a live byte stream of ``format`` (a key of
    :data:`CONTAINERS`): frames are coded as they fill, and the bytes handed out as the muxer
    writes them (a ``whole`` format's all at the end)."""

    def __init__(self, format: str, sample_rate: int) -> None:
        check_available(format)
        import av

        spec = CONTAINERS[format]
        self._av = av
        self._sink = io.BytesIO() if spec.whole else _Sink()
        self._out = av.open(self._sink, "w", format=spec.muxer, options=dict(spec.muxer_options))
        self._stream = self._out.add_stream(spec.codec, rate=sample_rate, layout="mono")
        if spec.bitrate:
            self._stream.bit_rate = spec.bitrate
        self._stream.options = dict(spec.codec_options)
        self._rate = sample_rate
        self._lossless = spec.lossless
        self._pts = 0

    def encode(self, pcm: torch.Tensor) -> bytes:
        if self._lossless:
            x, fmt = to_int16(pcm), "s16"
        else:
            x, fmt = np.clip(np.nan_to_num(pcm.detach().cpu().numpy().astype(np.float32)), -1.0, 1.0), "flt"
        if x.size:
            frame = self._av.AudioFrame.from_ndarray(x[None, :], format=fmt, layout="mono")
            frame.sample_rate, frame.pts = self._rate, self._pts
            self._pts += x.size
            for packet in self._stream.encode(frame):
                self._out.mux(packet)
        return b"" if isinstance(self._sink, io.BytesIO) else self._sink.take()

    def finish(self) -> bytes:
        for packet in self._stream.encode(None):
            self._out.mux(packet)
        self._out.close()  # writes the container's tail (Ogg's last page, FLAC's completed header)
        return self._sink.getvalue() if isinstance(self._sink, io.BytesIO) else self._sink.take()


class WavStreamEncoder:
    """16-bit mono WAV as a live stream: the header first, its two sizes left at their maximum
    (the length is known only at the end, and a stream cannot seek back). Readers take the data
    to the end of the file (libsndfile, FFmpeg, Python's ``wave``), as with OpenAI's streamed WAV."""

    def __init__(self, sample_rate: int) -> None:
        self._header = b"".join([b"RIFF", struct.pack("<I", 0xFFFFFFFF), b"WAVEfmt ",
                                 struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, 2 * sample_rate, 2, 16),
                                 b"data", struct.pack("<I", 0xFFFFFFFF)])

    def encode(self, pcm: torch.Tensor) -> bytes:
        header, self._header = self._header, b""
        return header + to_int16(pcm).tobytes()

    def finish(self) -> bytes:
        return self.encode(torch.zeros(0))


def check_available(encoding: str) -> None:
    """ImportError (what to install) if ``encoding`` needs a library this install lacks."""
    if encoding in CONTAINERS and importlib.util.find_spec("av") is None:
        raise ImportError(f"{encoding} output needs PyAV: pip install 'voicespec[serve]'")


def make_encoder(encoding: str, sample_rate: int) -> Encoder:
    return ContainerEncoder(encoding, sample_rate) if encoding in CONTAINERS else SampleEncoder(encoding)
