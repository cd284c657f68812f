"""The convolution step every streaming layer shares equals ``F.conv1d`` on both of its paths."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from voicespec.codec.stream import SMALL_CHUNK, padded_conv1d


@pytest.mark.parametrize("n", [1, 3, SMALL_CHUNK, SMALL_CHUNK + 5])
@pytest.mark.parametrize("dilation", [1, 3])
@pytest.mark.parametrize("kind", ["dense", "depthwise", "grouped", "multiplier"])
@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("bias", [True, False])
def test_padded_conv1d_equals_conv1d(n, dilation, kind, batch, bias):
    g = torch.Generator().manual_seed(n * 100 + dilation)
    c_in, k = 6, 4
    c_out, groups = {"dense": (5, 1), "depthwise": (6, 6), "grouped": (6, 3), "multiplier": (12, 6)}[kind]
    weight = torch.randn(c_out, c_in // groups, k, generator=g)
    b = torch.randn(c_out, generator=g) if bias else None
    xp = torch.randn(batch, c_in, n + (k - 1) * dilation, generator=g)
    got = padded_conv1d(xp, weight, b, dilation, groups)
    want = F.conv1d(xp, weight, b, dilation=dilation, groups=groups)
    assert got.shape == want.shape == (batch, c_out, n)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
