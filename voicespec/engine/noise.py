"""Per-position Gumbel noise: the randomness of the drafter-invariant coupling.

Sampling from ``softmax(x)`` is ``argmax(x + g)`` with ``g`` i.i.d. standard Gumbel (the
Gumbel-max trick). If the noise of the token at generated position ``t`` is a function of the seed
and ``t`` alone, plain decoding is a deterministic function of (seed, prompt), and a drafter that
proposes ``argmax(x_draft + g_t)`` is checked by comparing its token with ``argmax(x_target + g_t)``:
the committed tokens are exactly plain decoding's, whatever was drafted, whatever γ, tree, batch
or timing chose (Daliri, Musco & Suresh 2024, "Coupling without communication and
drafter-invariant speculative decoding"). A drafter close to the target agrees with it at
probability at least ``(1 - TV) / (1 + TV)``, a little below the ``1 - TV`` of the residual rule,
whose tokens depend on how the drafts fell.
"""

from __future__ import annotations

from collections import OrderedDict

import torch

MASK64 = (1 << 64) - 1


def position_seed(seed: int, position: int) -> int:
    """A 64-bit seed for ``position``'s noise (splitmix64 of the pair): neighbouring seeds and
    positions give unrelated streams."""
    z = (seed * 0x9E3779B97F4A7C15 + position * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


class PositionNoise:
    """The Gumbel noise ``[G, V]`` of each generated position of one request, drawn on demand and
    kept for the positions still in play (a drafter and the target read the same ones)."""

    def __init__(self, seed: int, keep: int = 256) -> None:
        self.seed = seed
        self.keep = keep
        self._gen = torch.Generator()
        self._cache: OrderedDict[int, torch.Tensor] = OrderedDict()

    def at(self, position: int, shape: tuple[int, int]) -> torch.Tensor:
        """``[G, V]`` float32: standard Gumbel noise for generated position ``position``."""
        g = self._cache.get(position)
        if g is None or g.shape != shape:
            self._gen.manual_seed(position_seed(self.seed, position))
            u = torch.rand(shape, generator=self._gen).clamp_(min=torch.finfo(torch.float32).tiny)
            g = u.log_().neg_().log_().neg_()  # -log(-log u), in place
            self._cache[position] = g
            if len(self._cache) > self.keep:
                self._cache.popitem(last=False)
        return g

    def perturb(self, warped: torch.Tensor, positions: list[int]) -> torch.Tensor:
        """``warped [n, G, V]`` (row ``i`` the logits of generated position ``positions[i]``) plus
        each row's noise: the argmax of a row is a draw from its softmax."""
        shape = (warped.shape[1], warped.shape[2])
        if len(positions) == 1:  # a plain step: no stack (broadcast over the one row, the same sums)
            return warped + self.at(positions[0], shape).to(warped.dtype)
        return warped + torch.stack([self.at(p, shape) for p in positions]).to(warped.dtype)
