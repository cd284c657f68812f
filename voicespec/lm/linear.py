"""Linear maps for the target's runtime forward, with the CPU kernel chosen by shape.

A verify pass multiplies a handful of rows (the pending step and the drafts: 2–21) by every weight
matrix. On the CPU PyTorch's default kernel (MKL's sgemm) is tuned for one row or for many: on the
2-core AMD EPYC, a 4-layer 256-wide target's pass over 15 rows cost 1.6–2.0× a one-row pass, most
of it in ``aten::mm``. oneDNN's kernel over a weight reordered once into its blocked layout (what
``torch.compile`` with freezing does) costs 1.2–1.35× for 15–21 rows and the same as MKL for one.
So a verify pass gets cheaper against the plain step it replaces, which is what speculation buys.

One row keeps the default kernel: plain decoding's numbers do not change. Weights are the model's
own; the reordered copy is made on first use and made again if the weight is changed in place or
replaced (its ``_version`` or storage moves). Anything but float32 inference on the CPU (a GPU, a
dtype, autograd) takes ``F.linear``, so training code may call through it unchanged.
``VOICESPEC_CPU_LINEAR=default`` keeps every product on ``F.linear`` (a CPU where oneDNN's kernel
is not the faster one, or an A/B); ``voicespec bench`` reports which kernel ran.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

MIN_ROWS = 2  # fewer rows take F.linear (measured equal at one row; see the module docstring)
KERNELS = ("onednn", "default")


def _oneDNN() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise") \
        and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


def cpu_kernel() -> str:
    """The kernel multi-row CPU products take: ``VOICESPEC_CPU_LINEAR`` (default ``onednn``),
    ``default`` where this torch build has no oneDNN linear."""
    choice = os.environ.get("VOICESPEC_CPU_LINEAR", "onednn").strip().lower()
    if choice not in KERNELS:
        raise ValueError(f"VOICESPEC_CPU_LINEAR must be one of {KERNELS}, got {choice!r}")
    return choice if _oneDNN() else "default"


@dataclass(slots=True)
class Affine:
    """A linear map's parameters without a module (``weight [out, in]``, ``bias [out]`` or None): what
    :class:`Linears` reads. Building an ``nn.Linear`` instead would run its initialiser, whose first
    call imports torch's symbolic-shape machinery (sympy): 0.7 s inside a process's first decode."""

    weight: torch.Tensor
    bias: torch.Tensor | None


class Linears:
    """``linears(module, x)``: ``module(x)`` for an ``nn.Linear`` (``x [..., in] -> [..., out]``),
    on the faster CPU kernel for ``x``'s row count. One per model: it keeps each weight's reordered copy."""

    def __init__(self, enabled: bool | None = None) -> None:
        """``enabled``: None follows :func:`cpu_kernel`."""
        self.enabled = (cpu_kernel() == "onednn") if enabled is None else enabled and _oneDNN()
        self._packed: dict[int, tuple[tuple, torch.Tensor]] = {}

    def __call__(self, module: nn.Linear | Affine, x: torch.Tensor) -> torch.Tensor:
        w = module.weight
        rows = x.numel() // x.shape[-1]
        if (not self.enabled or rows < MIN_ROWS or x.device.type != "cpu" or x.dtype != torch.float32
                or w.dtype != torch.float32 or (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))):
            return F.linear(x, w, module.bias)
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), self._weight(w), module.bias, "none", [], "")
        return y.view(*x.shape[:-1], y.shape[-1])

    def _weight(self, w: torch.Tensor) -> torch.Tensor:
        key = (w.data_ptr(), w._version, tuple(w.shape))
        hit = self._packed.get(id(w))
        if hit is None or hit[0] != key:
            hit = (key, torch.ops.mkldnn._reorder_linear_weight(w.detach(), None))
            self._packed[id(w)] = hit
        return hit[1]


class Joined:
    """Linear maps that read the same input, as one: with ``joined, sizes = j.linear(*parts)``,
    ``linears(joined, x).split(sizes, -1)`` gives each part's output (q, k and v; gate and up).
    One GEMM instead of several costs less at a pass's few rows (on the 2-core CPU, a layer's five
    such products over 16 rows 611 -> 425 µs and over 4 rows 389 -> 248 µs), and the values are the
    same: each output column is the same dot product over the same input (bitwise equal on the CPU
    kernels at 1, 4 and 16 rows). The parts are passed on every call (the layer's live modules, so
    a swapped module is followed); the joined weight is one tensor, refilled in place when a part's
    weight or bias changes or is replaced, so :class:`Linears` sees its version move and reorders
    it again."""

    def __init__(self) -> None:
        self._state: tuple[tuple, Affine, list[int]] | None = None  # (the parts' key, the map, its split): one read, one write

    def linear(self, *parts: nn.Linear) -> tuple[Affine, list[int]]:
        key = tuple((t.data_ptr(), 0 if t.is_inference() else t._version)  # an inference tensor has no version: never changed in place
                    for p in parts for t in (p.weight, p.bias) if t is not None)
        state = self._state
        if state is None or state[0] != key:
            with torch.inference_mode(False):  # an ordinary tensor, whose version Linears keys its copy by
                state = (key, self._join(parts, None if state is None else state[1]), [p.out_features for p in parts])
            self._state = state
        return state[1], state[2]

    @staticmethod
    def _join(parts: tuple[nn.Linear, ...], joined: Affine | None) -> Affine:
        w = torch.cat([p.weight.detach() for p in parts])
        b = None
        if any(p.bias is not None for p in parts):
            b = torch.cat([p.bias.detach() if p.bias is not None else w.new_zeros(p.out_features) for p in parts])
        if joined is not None and joined.weight.shape == w.shape and (joined.bias is None) == (b is None) \
                and joined.weight.dtype == w.dtype and joined.weight.device == w.device:
            joined.weight.copy_(w)  # the same tensor, a new version
            if b is not None:
                joined.bias.copy_(b)
            return joined
        return Affine(w, b)
