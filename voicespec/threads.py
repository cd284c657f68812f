"""How many intra-op threads torch runs with: one policy for ``say``, ``synth``, ``serve`` and ``bench``.

Our tensors are small (a 256-wide model, a handful of rows per pass), so a second intra-op
thread buys little on a quiet machine and costs a lot on a busy one: OpenMP's workers spin
against whatever else runs (``say`` measured RTF 1.5–9.7 at torch's default of 2 threads
beside a busy process, 0.47–0.66 at 1). The thread count also decides the float sums a
sampled token depends on, so one fixed default makes a seed give the same audio on every machine,
locally, on Ray (one thread per actor) and in the server, whatever its core count.

Standard library only: the CLI's parser reads the default without importing torch.
"""

from __future__ import annotations

DEFAULT_THREADS = 1
THREADS_HELP = (f"torch intra-op threads (default {DEFAULT_THREADS}: steady on a busy machine, and a seed gives the same "
                "audio on every machine; 0: torch's default, one per core)")


def check_threads(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"threads must be an integer >= 0, got {n!r}")
    return n


def use_threads(n: int = DEFAULT_THREADS) -> None:
    """Run torch's intra-op work on ``n`` threads (0: leave torch's default)."""
    if check_threads(n):
        import torch

        torch.set_num_threads(n)
