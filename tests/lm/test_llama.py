"""The plain-torch Llama forward over a position-addressed cache, against ``transformers`` as the oracle."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaModel

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.engine.kv_cache import KVCache
from voicespec.lm.codec_lm import CodecStepLM
from voicespec.lm.hf import HFCausalLM
from voicespec.lm.llama import LlamaStack
from voicespec.pipeline.tiny import codec_draft, flat_draft, tiny_codec_lm, tiny_flat


@pytest.fixture(scope="module")
def backbone():
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         intermediate_size=128, vocab_size=10)
    return LlamaModel(config).eval()


def _oracle(model: LlamaModel, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(inputs_embeds=x).last_hidden_state


def test_appends_and_rollbacks_equal_one_full_forward(backbone):
    stack = LlamaStack(backbone)
    x = torch.randn(1, 12, 64, generator=torch.Generator().manual_seed(1))
    ref = _oracle(backbone, x)
    cache = stack.new_cache(capacity=4)  # grows twice on the way
    torch.testing.assert_close(stack.forward(x[:, :5], cache, [0]), ref[:, :5], atol=1e-5, rtol=1e-4)
    stack.forward(torch.randn(1, 4, 64), cache, [0])  # a rejected block ...
    cache.truncate(0, 5)  # ... rolled back by moving the length
    torch.testing.assert_close(stack.forward(x[:, 5:12], cache, [0]), ref[:, 5:12], atol=1e-5, rtol=1e-4)
    assert cache.lengths == [12] and cache.capacity == 16


def test_rows_of_different_lengths_share_one_padded_pass(backbone):
    stack = LlamaStack(backbone)
    g = torch.Generator().manual_seed(2)
    a, b, c = torch.randn(1, 9, 64, generator=g), torch.randn(1, 5, 64, generator=g), torch.randn(1, 3, 64, generator=g)
    cache = stack.new_cache(rows=3)
    stack.forward(a[:, :6], cache, [0])
    stack.forward(b[:, :1], cache, [2])  # row 1 stays empty: a newcomer's prefill joins the batch
    block = torch.zeros(3, 3, 64)
    block[0], block[1, :3], block[2, :2] = a[0, 6:9], c[0], b[0, 1:3]
    out = stack.forward(block, cache, [0, 1, 2], counts=[3, 3, 2])
    torch.testing.assert_close(out[0], _oracle(backbone, a)[0, 6:9], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[1], _oracle(backbone, c)[0], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[2, :2], _oracle(backbone, b)[0, 1:3], atol=1e-5, rtol=1e-4)
    assert cache.lengths == [9, 3, 3]
    with pytest.raises(ValueError, match="cannot truncate"):
        cache.truncate(1, 4)


def test_kv_cache_rows_are_handed_out_lowest_first_and_grow_when_all_are_taken():
    cache = KVCache(layers=1, rows=2, kv_heads=1, head_dim=2, capacity=4)
    assert [cache.acquire(), cache.acquire()] == [0, 1]
    cache.write(0, 0, [0], torch.ones(1, 1, 3, 2), -torch.ones(1, 1, 3, 2))
    cache.lengths[0] = 3
    assert cache.acquire() == 2 and cache.rows == 4  # doubled, row 0 kept
    assert cache.k[0, 0, 0, :3].tolist() == [[1.0, 1.0]] * 3 and cache.lengths[0] == 3
    cache.release(1)
    assert cache.acquire() == 1 and cache.lengths[1] == 0 and cache.in_use == 3
    assert cache.acquire() == 3
    cache.reserve(9)
    for row in range(3):
        cache.release(row)
    assert cache.rows == 4 and cache.capacity == 16 and cache.in_use == 1  # row 3 still out
    cache.release(3)
    assert cache.rows == 2 and cache.capacity == 4 and cache.in_use == 0  # the last one back: shrunk


def test_kv_cache_writes_a_span_of_rows_at_their_own_positions():
    cache = KVCache(layers=1, rows=3, kv_heads=1, head_dim=1, capacity=8)
    k = torch.arange(6.0).view(3, 1, 2, 1)  # rows 0..2, two positions each
    cache.write(0, 0, [0, 3, 5], k, -k)
    got, neg = cache.read(0, 0, 3, 7)
    assert got[:, 0, :, 0].tolist() == [[0, 1, 0, 0, 0, 0, 0], [0, 0, 0, 2, 3, 0, 0], [0, 0, 0, 0, 0, 4, 5]]
    assert torch.equal(neg, -got)


def test_a_batch_of_scattered_rows_equals_each_row_alone(backbone):
    """Rows 0 and 2 in one pass while row 1 (another session's) sits between them untouched."""
    stack = LlamaStack(backbone)
    g = torch.Generator().manual_seed(4)
    a, b, c = (torch.randn(1, 6, 64, generator=g) for _ in range(3))
    cache = stack.new_cache(rows=3)
    for r, x in enumerate((a, b, c)):
        stack.forward(x[:, :4], cache, [r])
    out = stack.forward(torch.cat([c[:, 4:], a[:, 4:]]), cache, [2, 0])
    torch.testing.assert_close(out[0], _oracle(backbone, c)[0, 4:], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(out[1], _oracle(backbone, a)[0, 4:], atol=1e-5, rtol=1e-4)
    assert cache.lengths == [6, 4, 6]
    torch.testing.assert_close(stack.forward(b[:, 4:], cache, [1])[0], _oracle(backbone, b)[0, 4:], atol=1e-5, rtol=1e-4)


def _decode(target, drafter, greedy: bool, gamma: int):
    sampling = SamplingConfig(temperature=0) if greedy else SamplingConfig(temperature=1.0, top_k=5)
    gen = SpecDecoder(target, drafter, DecodeConfig(sampling, gamma=gamma, max_steps=40, seed=3))
    return gen.generate(target.layout.prompt([1, 2, 3])).run()


@pytest.mark.parametrize("kind", ["flat", "delay", "coarse"])
@pytest.mark.parametrize("greedy", [True, False])
def test_the_engine_decodes_the_same_frames_on_either_forward(kind, greedy):
    """Static cache + plain forward vs ``transformers`` + DynamicCache: the same frames, greedy
    and seeded sampling, through speculation with rejections and rollbacks."""
    if kind == "flat":
        fast = tiny_flat(seed=1)
        slow = HFCausalLM(fast.model, fast.layout, static=False)
        drafter_of = lambda t: ModelDrafter(flat_draft(t))  # noqa: E731
    else:
        fast = tiny_codec_lm(seed=5, n_codebooks=3, codebook_size=8, coarse_first=kind == "coarse")
        slow = CodecStepLM(fast.model, static=False)
        drafter_of = lambda t: ModelDrafter(codec_draft(t))  # noqa: E731
    assert fast.stack is not None and slow.stack is None
    for drafter in (drafter_of(fast), NGramDrafter()):
        a, b = _decode(fast, drafter, greedy, 3), _decode(slow, drafter, greedy, 3)
        assert a.shape[1] > 0 and torch.equal(a, b)


def test_kv_cache_gives_a_burst_back_while_a_session_still_speaks(backbone):
    """A long-lived row 0 beside a burst of 15 rows that come and go: the rows and the positions
    halve back (the first pass after the burst), row 0's keys and values are kept, and its next
    append still equals a full forward."""
    stack = LlamaStack(backbone)
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 10, 64, generator=g)
    cache = stack.new_cache(rows=2, capacity=4)
    assert cache.acquire() == 0
    stack.forward(x[:, :6], cache, [0])
    burst = [cache.acquire() for _ in range(15)]
    cache.reserve(64)
    assert cache.rows == 16 and cache.capacity == 64
    for row in burst:
        cache.release(row)
    assert cache.rows == 16 and cache.capacity == 64 and cache.in_use == 1  # nothing moves on release
    out = stack.forward(x[:, 6:], cache, [0])
    assert cache.rows == 2 and cache.capacity == 32  # 10 positions in use: between 2x and 4x of it kept
    torch.testing.assert_close(out, _oracle(backbone, x)[:, 6:], atol=1e-5, rtol=1e-4)
    assert cache.acquire() == 1 and cache.acquire() == 2 and cache.rows == 4  # and it grows again as before
