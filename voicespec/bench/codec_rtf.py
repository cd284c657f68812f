"""The streaming codec decoder's real-time factor by chunk size: what a codec costs a voice."""

from __future__ import annotations

import math
import statistics
import time

import torch

from voicespec.codec.model import Codec


def decode_rtf(codec: Codec, chunk_frames: int, seconds: float = 2.0, repeats: int = 3, seed: int = 0) -> dict:
    """Streaming decode real-time factor (decode wall time / audio duration; < 1 is faster than
    real time) for chunks of ``chunk_frames`` frames, median of ``repeats`` runs on random codes.
    Also reports the full (non-streaming) decode's RTF on the same codes for comparison."""
    if chunk_frames < 1 or seconds <= 0 or repeats < 1:
        raise ValueError("chunk_frames >= 1, seconds > 0 and repeats >= 1 required")
    n_frames = max(1, round(seconds * codec.frame_rate))
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, codec.codebook_size, (codec.n_codebooks, n_frames), generator=gen)
    audio_s = n_frames * codec.hop_length / codec.sample_rate
    dec = codec.streaming_decoder()

    def streamed() -> None:
        dec.reset()
        for i in range(0, n_frames, chunk_frames):
            dec.push(codes[:, i: i + chunk_frames])
        dec.flush()

    def timed(fn) -> float:
        fn()  # warm-up run (allocator, kernels)
        walls = []
        for _ in range(repeats):
            if codec.device.type == "cuda":
                torch.cuda.synchronize(codec.device)
            t0 = time.perf_counter()
            fn()
            if codec.device.type == "cuda":
                torch.cuda.synchronize(codec.device)
            walls.append(time.perf_counter() - t0)
        return statistics.median(walls)

    wall = timed(streamed)
    full_wall = timed(lambda: codec.decode(codes))
    return {
        "chunk_frames": chunk_frames,
        "chunk_ms": 1000.0 * chunk_frames / codec.frame_rate,
        "frames": n_frames,
        "audio_s": audio_s,
        "decode_s": wall,
        "rtf": wall / audio_s,
        "per_chunk_ms": 1000.0 * wall / math.ceil(n_frames / chunk_frames),
        "full_decode_rtf": full_wall / audio_s,
        "warmup_frames": dec.warmup_frames,
        "repeats": repeats,
    }
