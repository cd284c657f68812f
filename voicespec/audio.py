"""Audio plumbing: streaming resampling, PCM encodings, atomic file writes."""

from __future__ import annotations

import io
import math
import os
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import numpy as np
import soundfile as sf
import torch
import torchaudio.transforms as T


# Files ``say``/``synth`` write, by extension: libsndfile (through soundfile) encodes them all.
FILE_FORMATS = {".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS"),
                ".mp3": ("MP3", "MPEG_LAYER_III")}


def to_int16(pcm: np.ndarray | torch.Tensor) -> np.ndarray:
    """Float PCM in [-1, 1] to 16-bit samples: clipped, scaled by 32767, rounded. The one
    quantization: the stream's ``pcm_s16le`` and the files ``say``/``synth`` write use it, so they
    agree sample for sample."""
    x = pcm.detach().cpu().numpy() if isinstance(pcm, torch.Tensor) else np.asarray(pcm)
    x = np.nan_to_num(x.astype(np.float32, copy=False))
    return (np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2")


# Telephony: ITU-T G.711, one byte per sample, coded as the ITU/Sun reference does (the standard
# library's audioop; the audioop-lts package where Python >= 3.13 removed it).
G711 = {"mulaw": "lin2ulaw", "alaw": "lin2alaw"}


def to_encoding(pcm: torch.Tensor, encoding: str) -> bytes:
    """Float PCM in [-1, 1] to the bytes of a sample-wise encoding: little-endian ``f32le``,
    ``pcm_s16le`` (clipped), or G.711 ``mulaw``/``alaw`` of those 16-bit samples. (Opus keeps
    state across chunks: :class:`voicespec.serve.encoders.ContainerEncoder`.)"""
    if encoding == "f32le":
        return np.nan_to_num(pcm.detach().cpu().numpy().astype(np.float32, copy=False)).astype("<f4").tobytes()
    if encoding == "pcm_s16le":
        return to_int16(pcm).tobytes()
    if encoding in G711:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # 3.11/3.12 warn of the removal; 3.13+ use audioop-lts
            import audioop
        return getattr(audioop, G711[encoding])(to_int16(pcm).tobytes(), 2)
    raise ValueError(f"unknown encoding {encoding!r} for sample-wise coding; choose one of f32le, pcm_s16le, "
                     f"{', '.join(G711)} (opus keeps state: voicespec.serve.encoders)")


class StreamingResampler:
    """Resamples a stream chunk by chunk with the same result as resampling it whole.

    torchaudio's windowed-sinc resampler looks ``width`` input samples both ways, so each block is
    resampled with that much context on either side and only the middle is kept; the right context
    is why up to one block of input is held back until the next chunk or ``flush``.
    """

    def __init__(self, orig_freq: int, new_freq: int, lowpass_filter_width: int = 6) -> None:
        g = math.gcd(orig_freq, new_freq)
        self.orig, self.new = orig_freq // g, new_freq // g
        self.identity = self.orig == self.new
        self._resample = T.Resample(self.orig, self.new, lowpass_filter_width=lowpass_filter_width)  # kernel built once
        # Input samples each output sample looks at on either side, rounded up to whole periods.
        half = math.ceil(lowpass_filter_width * self.orig / min(self.orig, self.new)) + 1
        self.pad = math.ceil(half / self.orig) * self.orig
        self.reset()

    def reset(self) -> None:
        self._buf = torch.zeros(self.pad)  # left context: silence before the stream, as whole-signal resampling pads
        self._consumed = 0  # input samples of _buf already turned into output (after the left context)

    def _run(self, x: torch.Tensor) -> torch.Tensor:
        return self._resample(x)

    def push(self, pcm: torch.Tensor) -> torch.Tensor:
        if self.identity:
            return pcm
        self._buf = torch.cat([self._buf, pcm.float()])
        ready = (self._buf.shape[0] - 2 * self.pad) // self.orig * self.orig  # whole periods with right context
        if ready <= 0:
            return torch.zeros(0)
        out = self._run(self._buf[: self.pad + ready + self.pad])
        a = self.pad * self.new // self.orig
        keep = out[a : a + ready * self.new // self.orig]
        self._buf = self._buf[ready:]
        return keep

    def flush(self) -> torch.Tensor:
        """The rest of the stream (its end padded with silence, as whole-signal resampling does)."""
        if self.identity:
            return torch.zeros(0)
        n = self._buf.shape[0] - self.pad
        if n <= 0:
            self.reset()
            return torch.zeros(0)
        total = math.ceil(n * self.new / self.orig)
        out = self._run(torch.cat([self._buf, torch.zeros(self.pad + self.orig)]))
        a = self.pad * self.new // self.orig
        self.reset()
        return out[a : a + total]


def check_audio_path(path: str | Path) -> tuple[str, str]:
    """The (format, subtype) for a path by its extension; a clear error for anything else."""
    fmt = FILE_FORMATS.get(Path(path).suffix.lower())
    if fmt is None:
        raise ValueError(f"{path}: unsupported extension (use {', '.join(FILE_FORMATS)})")
    return fmt


def encode_audio(pcm: np.ndarray | torch.Tensor, sample_rate: int, suffix: str) -> bytes:
    """A whole file's bytes in the format of extension ``suffix`` (``.wav``, ``.mp3``, ...)."""
    buf = io.BytesIO()
    _write(buf, pcm, sample_rate, check_audio_path("audio" + suffix))
    return buf.getvalue()


def _write(file: IO, pcm: np.ndarray | torch.Tensor, sample_rate: int, fmt: tuple[str, str]) -> None:
    """16-bit quantized as the stream quantizes, then encoded (lossy for OGG and MP3)."""
    sf.write(file, to_int16(pcm), sample_rate, format=fmt[0], subtype=fmt[1])


@contextmanager
def atomic_open(path: str | Path, mode: str = "wb", **kw) -> Iterator[IO]:
    """Open a temporary file beside ``path``; on success fsync it and rename it over ``path``,
    on any error remove it. Readers see the old file or the complete new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would survive the rename
    try:
        with os.fdopen(fd, mode, **kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_audio_atomic(path: str | Path, pcm: np.ndarray | torch.Tensor, sample_rate: int) -> None:
    """Write an audio file (format by extension, :data:`FILE_FORMATS`) atomically (see :func:`atomic_open`)."""
    fmt = check_audio_path(path)
    with atomic_open(path) as f:
        _write(f, pcm, sample_rate, fmt)


def write_audio_chunks(path: str | Path, chunks: Iterable[np.ndarray | torch.Tensor], sample_rate: int,
                       suffix: str | None = None) -> None:
    """Write PCM chunks to ``path`` as they come (atomically), so a chapter's audio is never held
    whole; format by ``suffix`` (default: the path's extension). The bytes are
    :func:`write_audio_atomic`'s for the chunks joined, but for an Ogg stream's random serial number."""
    fmt = check_audio_path("audio" + suffix if suffix else path)
    with atomic_open(path) as f, sf.SoundFile(f, "w", sample_rate, 1, fmt[1], format=fmt[0]) as out:
        for pcm in chunks:
            out.write(to_int16(pcm))
