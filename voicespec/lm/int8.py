"""Weight-only int8 linear maps, for draft models.

At batch 1 a draft step is a few matrix-vector products whose cost is reading the weights from
memory (measured on the 2-core CPU: a 2 MB float32 matrix costs ~300 µs cold, its int8 copy
~140 µs). A draft may propose from any distribution without breaking exactness (the verifier
corrects for it), so quantizing a draft can cost acceptance but never correctness; the target
is never quantized. Symmetric, one scale per output row (as gpt-fast's int8 weight-only mode),
on PyTorch's fused CPU kernel; elsewhere the dequantized weight in float.
"""

from __future__ import annotations

import torch
from torch.nn import functional as F


def quantize_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight [out, in]`` -> int8 codes ``[out, in]`` and float scales ``[out]``, each row
    scaled so its largest magnitude is 127 (``codes * scales[:, None]`` approximates ``weight``)."""
    w = weight.detach().float()
    scales = w.abs().amax(1).clamp_min(1e-12) / 127
    codes = (w / scales[:, None]).round().clamp(-127, 127).to(torch.int8).contiguous()
    return codes, scales


class Int8Linear:
    """``x [N, in] -> x @ weight.T + bias [N, out]`` from an int8 copy of ``weight`` (inference only)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None) -> None:
        codes, scales = quantize_rows(weight)
        self.bias = None if bias is None else bias.detach().float().reshape(-1)
        # The CPU kernel reads the input dimension in blocks of 16 (other widths crash it, measured on torch 2.10).
        self.fused = codes.device.type == "cpu" and codes.shape[1] % 16 == 0 and hasattr(torch, "_weight_int8pack_mm")
        if self.fused:  # activations in bfloat16: the kernel's fast path
            self.codes, self.scales = codes, scales.to(torch.bfloat16)
        else:
            self.weight = codes.float() * scales[:, None]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x [N, in]`` -> ``[N, out]`` in ``x``'s dtype."""
        if self.fused:
            y = torch._weight_int8pack_mm(x.to(torch.bfloat16), self.codes, self.scales).to(x.dtype)
        else:
            y = F.linear(x, self.weight.to(x.dtype))
        return y if self.bias is None else y + self.bias.to(x.dtype)
