"""Codec fixtures: random codes for a codec, and a streaming decoder driven chunk by chunk."""

from __future__ import annotations

import pytest
import torch


def _random_codes(codec, n_frames: int, seed: int = 1) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, codec.codebook_size, (codec.n_codebooks, n_frames), generator=gen)


def chunk_sizes(n_frames: int, sizes) -> list[int]:
    """``sizes`` repeated (cyclically) until they cover ``n_frames``; the last one cut to fit."""
    out, i = [], 0
    while sum(out) < n_frames:
        out.append(min(sizes[i % len(sizes)], n_frames - sum(out)))
        i += 1
    return out


def _stream(dec, codes: torch.Tensor, sizes) -> list[torch.Tensor]:
    pieces, start = [], 0
    for n in chunk_sizes(codes.shape[1], sizes):
        pieces.append(dec.push(codes[:, start: start + n]))
        start += n
    pieces.append(dec.flush())
    return pieces


@pytest.fixture(scope="session")
def random_codes():
    """``random_codes(codec, n_frames, seed=1)``: seeded uniform codes ``[K, n_frames]``."""
    return _random_codes


@pytest.fixture(scope="session")
def stream():
    """``stream(decoder, codes, sizes)``: push ``codes`` in chunks of ``sizes`` frames (repeated
    cyclically, the last cut to fit); the PCM pieces of every push, in order, and last the flush's."""
    return _stream
