"""Our plain-torch Llama backbone against ``transformers``' ``LlamaModel`` with the same weights."""

from __future__ import annotations

import copy

import pytest
import torch

from voicespec.lm.backbone import BackboneConfig, LlamaBackbone
from voicespec.lm.hf import hf_llama
from voicespec.lm.llama import LlamaStack


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    ours = LlamaBackbone(BackboneConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                        intermediate_size=96, rope_theta=500.0)).eval()
    with torch.no_grad():  # norms away from one, so a wrong norm or a missed gain shows
        for name, p in ours.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return ours, hf_llama(ours)


def test_the_twin_holds_every_weight_of_ours(pair):
    ours, twin = pair
    theirs = twin.state_dict()
    assert set(ours.state_dict()) == set(theirs) - {"embed_tokens.weight"}
    assert all(torch.equal(v, theirs[k]) for k, v in ours.state_dict().items())


def test_a_full_causal_pass_equals_transformers(pair):
    ours, twin = pair
    x = torch.randn(2, 11, 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = twin(inputs_embeds=x).last_hidden_state
        torch.testing.assert_close(ours(x), ref, atol=1e-5, rtol=1e-4)
        assert not torch.allclose(ours(x[:, 1:]), ref[:, 1:], atol=1e-3)  # positions matter: the check can fail


def test_the_cached_stack_over_ours_equals_transformers(pair):
    ours, twin = pair
    stack = LlamaStack(ours)
    x = torch.randn(1, 9, 64, generator=torch.Generator().manual_seed(2))
    cache = stack.new_cache()
    stack.forward(x[:, :4], cache, [0])
    out = stack.forward(x[:, 4:], cache, [0])
    with torch.no_grad():
        torch.testing.assert_close(out, twin(inputs_embeds=x).last_hidden_state[:, 4:], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rms_norm_is_transformers_bit_for_bit(pair, dtype):
    """float32 on the CPU takes torch's fused ``rms_norm`` (one dispatch), other dtypes the formula
    in its order: either way the values of ``transformers``' LlamaRMSNorm, bit for bit."""
    ours, theirs = (copy.deepcopy(m.layers[0].input_layernorm).to(dtype) for m in pair)
    x = torch.randn(5, 3, 64, generator=torch.Generator().manual_seed(2)).to(dtype)
    with torch.no_grad():
        assert torch.equal(ours(x), theirs(x))
        assert not torch.equal(ours(x), x)  # a norm that did nothing would fail
