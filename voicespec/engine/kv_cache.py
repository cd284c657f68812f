"""A position-addressed KV cache: preallocated per row, a length per row (gpt-fast, vLLM).

Appending writes keys and values at positions ``length .. length+T`` of a row; rolling back a
rejected draft is moving the row's length back — nothing is copied or freed. Rows are the unit a
batched scheduler hands out to sessions; lengths live on the host (Python ints), so deciding what
to attend to never waits for the device.
"""

from __future__ import annotations

import torch


class KVCache:
    """Keys and values ``[layers, rows, kv_heads, capacity, head_dim]``; ``lengths[r]`` cached
    positions of row ``r``. ``capacity`` grows (doubling, all rows at once) when a row needs more."""

    def __init__(self, layers: int, rows: int, kv_heads: int, head_dim: int, capacity: int = 256,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        shape = (layers, rows, kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.lengths = [0] * rows

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    def reserve(self, needed: int) -> None:
        """Room for ``needed`` positions in every row (grows by doubling; existing entries kept)."""
        if needed <= self.capacity:
            return
        new = self.capacity
        while new < needed:
            new *= 2
        for name in ("k", "v"):
            old = getattr(self, name)
            grown = old.new_zeros((*old.shape[:3], new, old.shape[4]))
            grown[:, :, :, : old.shape[3]] = old
            setattr(self, name, grown)

    def write(self, layer: int, rows: list[int], start: list[int], k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k, v [B, kv_heads, T, head_dim]`` of row ``rows[b]`` at positions ``start[b] + t``."""
        T = k.shape[2]
        for b, (r, s) in enumerate(zip(rows, start)):
            self.k[layer, r, :, s: s + T] = k[b]
            self.v[layer, r, :, s: s + T] = v[b]

    def read(self, layer: int, rows: list[int], upto: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of ``rows`` over positions ``0 .. upto``: ``[B, kv_heads, upto, head_dim]``."""
        if rows == list(range(rows[0], rows[0] + len(rows))):  # contiguous rows: a view, no copy
            return self.k[layer, rows[0]: rows[0] + len(rows), :, :upto], self.v[layer, rows[0]: rows[0] + len(rows), :, :upto]
        return self.k[layer, rows, :, :upto], self.v[layer, rows, :, :upto]

    def truncate(self, row: int, length: int) -> None:
        """Roll row ``row`` back to its first ``length`` positions."""
        if not 0 <= length <= self.lengths[row]:
            raise ValueError(f"row {row} holds {self.lengths[row]} positions; cannot truncate to {length}")
        self.lengths[row] = length
