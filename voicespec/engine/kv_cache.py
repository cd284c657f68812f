"""A position-addressed KV cache: preallocated per row, a length per row (gpt-fast, vLLM).

Appending writes keys and values at positions ``length .. length+T`` of a row; rolling back a
rejected draft is moving the row's length back — nothing is copied or freed. Rows are the unit a
batched scheduler hands out to sessions (:meth:`KVCache.acquire` / :meth:`KVCache.release`); lengths
live on the host (Python ints), so deciding what to attend to never waits for the device.

A batched pass covers a *span* of consecutive rows, so reads are views, never gathers (a gather
of every row's history per layer would cost more than the attention). Rows of the span outside
the batch get a zero-count block: written past their length, which nothing attends and their own
next append overwrites.
"""

from __future__ import annotations

import threading

import torch


class KVCache:
    """Keys and values ``[layers, rows, kv_heads, capacity, head_dim]``; ``lengths[r]`` cached
    positions of row ``r``. ``capacity`` grows (doubling, all rows at once) when a row needs more,
    and so do the rows when every one is in use; both shrink back once no row is in use, and halve
    while what is in use fits in a quarter of them (:meth:`_fit`)."""

    def __init__(self, layers: int, rows: int, kv_heads: int, head_dim: int, capacity: int = 256,
                 dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> None:
        self._initial = (layers, rows, kv_heads, capacity, head_dim)
        self._dtype, self._device = dtype, device
        self._lock = threading.Lock()  # release() may come from a finalizer on another thread
        self._empty()

    def _empty(self) -> None:
        """Back to the initial rows and capacity, every row free."""
        self.k = torch.zeros(self._initial, dtype=self._dtype, device=self._device)
        self.v = torch.zeros(self._initial, dtype=self._dtype, device=self._device)
        self.lengths = [0] * self._initial[1]
        self._free = list(range(self._initial[1]))  # lowest first: active rows stay packed, spans stay short

    @property
    def capacity(self) -> int:
        return self.k.shape[3]

    @property
    def rows(self) -> int:
        return self.k.shape[1]

    @property
    def in_use(self) -> int:
        return self.rows - len(self._free)

    def acquire(self) -> int:
        """A free row, empty; the rows double when none is free."""
        with self._lock:
            if not self._free:
                old = self.rows
                self._grow(rows=2 * old)
                self._free = list(range(old, self.rows))
            row = self._free.pop(0)
            self.lengths[row] = 0
            return row

    def release(self, row: int) -> None:
        """Give ``row`` back (its contents are garbage from now on). When the last row in use comes
        back, the cache shrinks to its initial size: a burst of sessions does not keep its memory."""
        with self._lock:
            self.lengths[row] = 0
            self._free.append(row)
            self._free.sort()
            if len(self._free) == self.rows and self.k.shape != self._initial:
                self._empty()

    def reserve(self, needed: int) -> None:
        """Room for ``needed`` positions in every row (grows by doubling; existing entries kept).
        Called before each pass on the thread that runs them, so it is also where the cache shrinks:
        no view of the old tensors is in use then."""
        with self._lock:
            self._fit(needed)
        if needed <= self.capacity:
            return
        new = self.capacity
        while new < needed:
            new *= 2
        self._grow(capacity=new)

    def _fit(self, needed: int) -> None:
        """Halve the rows while every row in use lies in the first quarter, and the positions while
        every row in use (and ``needed``) fits in a quarter: a burst of sessions gives its memory
        back while others still speak (a server never empties), and the factor of two left spare
        keeps a steady load from resizing back and forth. Rows are handed out lowest first, so the
        rows in use stay low."""
        free = set(self._free)
        used = [r for r in range(self.rows) if r not in free]
        if not used:
            return
        top = used[-1] + 1
        longest = max(needed, *(self.lengths[r] for r in used))
        rows, capacity = self.rows, self.capacity
        while rows > self._initial[1] and top <= rows // 4:
            rows //= 2
        while capacity > self._initial[3] and longest <= capacity // 4:
            capacity //= 2
        if (rows, capacity) == (self.rows, self.capacity):
            return
        self.k = self.k[:, :rows, :, :capacity].clone()
        self.v = self.v[:, :rows, :, :capacity].clone()
        self.lengths = self.lengths[:rows]
        self._free = [r for r in self._free if r < rows]

    def _grow(self, rows: int | None = None, capacity: int | None = None) -> None:
        R, C = self.k.shape[1], self.k.shape[3]
        for name in ("k", "v"):
            old = getattr(self, name)
            grown = old.new_zeros((old.shape[0], rows or R, old.shape[2], capacity or C, old.shape[4]))
            grown[:, :R, :, :C] = old
            setattr(self, name, grown)
        self.lengths += [0] * ((rows or R) - R)

    def write(self, layer: int, lo: int, start: list[int], k: torch.Tensor, v: torch.Tensor,
              pos: torch.Tensor | None = None) -> None:
        """Store ``k, v [S, kv_heads, T, head_dim]`` of rows ``lo .. lo+S`` at positions
        ``start[s] + t`` (``pos [S, T]``, the same positions on the device, when the caller has them)."""
        S, _, T, _ = k.shape
        if S == 1:  # one row: a slice, and no index tensor
            self.k[layer, lo, :, start[0]: start[0] + T] = k[0]
            self.v[layer, lo, :, start[0]: start[0] + T] = v[0]
            return
        if pos is None:
            pos = torch.tensor(start, device=k.device)[:, None] + torch.arange(T, device=k.device)
        row = torch.arange(S, device=k.device)[:, None]
        self.k[layer, lo: lo + S][row, :, pos] = k.transpose(1, 2)  # [S, T, kv_heads, head_dim]
        self.v[layer, lo: lo + S][row, :, pos] = v.transpose(1, 2)

    def read(self, layer: int, lo: int, hi: int, upto: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Views of rows ``lo .. hi`` over positions ``0 .. upto``: ``[hi-lo, kv_heads, upto, head_dim]``."""
        return self.k[layer, lo: hi, :, :upto], self.v[layer, lo: hi, :, :upto]

    @torch.inference_mode()
    def move(self, row: int, src: list[int], dst: list[int]) -> None:
        """Copy the keys and values of positions ``src`` of ``row`` to positions ``dst`` (every
        layer): the accepted path of a draft tree moved into place after its verify pass."""
        if src == dst:
            return
        s, d = torch.tensor(src, device=self.k.device), torch.tensor(dst, device=self.k.device)
        self.k[:, row, :, d] = self.k[:, row, :, s]
        self.v[:, row, :, d] = self.v[:, row, :, s]

    def truncate(self, row: int, length: int) -> None:
        """Roll row ``row`` back to its first ``length`` positions."""
        if not 0 <= length <= self.lengths[row]:
            raise ValueError(f"row {row} holds {self.lengths[row]} positions; cannot truncate to {length}")
        self.lengths[row] = length
