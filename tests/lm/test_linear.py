"""The target's linear maps on the CPU kernel chosen by row count: the same map as ``F.linear``,
the reordered weight remade when the weight changes, and every case it must not take (one row,
autograd, another dtype) left to ``F.linear`` itself."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from voicespec.lm.linear import Joined, Linears, _oneDNN, cpu_kernel

pytestmark = pytest.mark.skipif(not _oneDNN(), reason="this torch build has no oneDNN linear")


def _layer(bias: bool = True) -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(64, 48, bias=bias).requires_grad_(False)


@pytest.mark.parametrize("shape", [(5, 64), (2, 7, 64), (3, 1, 64)])
@pytest.mark.parametrize("bias", [True, False])
def test_reordered_kernel_is_the_same_map(shape, bias):
    layer, lin = _layer(bias), Linears()
    x = torch.randn(shape)
    y = lin(layer, x)
    assert y.shape == (*shape[:-1], 48)
    assert torch.allclose(y, F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    assert len(lin._packed) == 1  # it did take the reordered path


def test_one_row_and_autograd_take_f_linear():
    layer, lin = _layer(), Linears()
    one = torch.randn(1, 64)
    assert torch.equal(lin(layer, one), F.linear(one, layer.weight, layer.bias))
    layer.requires_grad_(True)
    x = torch.randn(4, 64)
    y = lin(layer, x)
    y.sum().backward()  # gradients flow: the training path is F.linear's
    assert layer.weight.grad is not None and not lin._packed


def test_other_dtypes_and_disabled_take_f_linear():
    layer = _layer().to(torch.float64)
    lin = Linears()
    x = torch.randn(4, 64, dtype=torch.float64)
    assert torch.equal(lin(layer, x), F.linear(x, layer.weight, layer.bias)) and not lin._packed
    off, layer32 = Linears(enabled=False), _layer()
    x32 = torch.randn(4, 64)
    assert torch.equal(off(layer32, x32), F.linear(x32, layer32.weight, layer32.bias)) and not off._packed


def test_weight_changed_in_place_or_replaced_is_reordered_again():
    layer, lin = _layer(), Linears()
    x = torch.randn(4, 64)
    lin(layer, x)
    layer.weight.mul_(2)  # in place (e.g. load_state_dict into the same tensor)
    assert torch.allclose(lin(layer, x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)
    layer.weight = nn.Parameter(torch.randn(48, 64), requires_grad=False)  # replaced
    assert torch.allclose(lin(layer, x), F.linear(x, layer.weight, layer.bias), atol=1e-5, rtol=1e-5)


def test_the_environment_chooses_the_kernel(monkeypatch):
    monkeypatch.setenv("VOICESPEC_CPU_LINEAR", "default")
    assert cpu_kernel() == "default" and not Linears().enabled
    monkeypatch.setenv("VOICESPEC_CPU_LINEAR", "oneDNN")
    assert cpu_kernel() == "onednn" and Linears().enabled
    monkeypatch.setenv("VOICESPEC_CPU_LINEAR", "mkl")
    with pytest.raises(ValueError, match="VOICESPEC_CPU_LINEAR must be one of"):
        Linears()


@pytest.mark.parametrize("rows", [1, 4, 16])
def test_joined_maps_give_each_part_its_own_values(rows):
    torch.manual_seed(1)
    q, k, v = (nn.Linear(64, n, bias=False).requires_grad_(False) for n in (64, 32, 32))
    lin = Linears()
    joined, sizes = Joined().linear(q, k, v)
    x = torch.randn(rows, 1, 64)
    parts = lin(joined, x).split(sizes, -1)
    for part, layer in zip(parts, (q, k, v)):
        assert part.shape == (rows, 1, layer.out_features)
        assert torch.equal(part, lin(layer, x))  # the same dot products: bitwise, so no token can change


def test_joined_maps_follow_every_change_of_a_part_through_the_reordered_kernel():
    """Changed in place, replaced, or a part swapped for another module: each time the joined map
    (and the reordered copy Linears keeps of it) gives the parts' current values."""
    torch.manual_seed(2)
    gate, up = nn.Linear(64, 48).requires_grad_(False), nn.Linear(64, 16, bias=False).requires_grad_(False)
    j, lin, x = Joined(), Linears(), torch.randn(5, 64)

    def check(*parts):
        joined, sizes = j.linear(*parts)
        for got, part in zip(lin(joined, x).split(sizes, -1), parts):
            assert torch.allclose(got, F.linear(x, part.weight, part.bias), atol=1e-5, rtol=1e-5)

    check(gate, up)
    first = j.linear(gate, up)[0]
    for _ in range(3):  # repeated changes: one joined tensor, refilled, never a stale reordered copy
        gate.weight.mul_(2)
        check(gate, up)
    assert j.linear(gate, up)[0] is first and len(lin._packed) == 1
    up.weight = nn.Parameter(torch.randn(16, 64), requires_grad=False)  # replaced
    check(gate, up)
    other = nn.Linear(64, 16).requires_grad_(False)  # a part swapped for another module (with a bias)
    check(gate, other)
    with torch.inference_mode():  # weights made under inference mode (no version counter)
        inf = nn.Linear(64, 8)
    assert torch.equal(Joined().linear(inf)[0].weight, inf.weight)
