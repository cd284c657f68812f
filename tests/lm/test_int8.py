"""Weight-only int8 for drafters: the quantization's error bound, the fused kernel against float
and against its own fallback, and the int8 feature block against the float one it copies."""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from voicespec.lm.draft_heads import DraftHeadsConfig, Int8Block
from voicespec.lm.int8 import Int8Linear, quantize_rows
from voicespec.pipeline.tiny import tiny_codec_lm, tiny_draft_heads


def test_quantize_rows_is_within_half_a_step_per_element():
    w = torch.randn(40, 32) * torch.linspace(0.01, 10, 40)[:, None]  # rows of very different scales
    codes, scales = quantize_rows(w)
    assert codes.dtype == torch.int8 and codes.abs().max() == 127
    err = (codes.float() * scales[:, None] - w).abs()
    assert bool((err <= scales[:, None] / 2 + 1e-6).all())


@pytest.mark.parametrize("in_features,fused", [(64, True), (256, True), (24, False), (13, False)])
def test_int8_linear_matches_float_fused_or_not(in_features, fused):
    """Widths the CPU kernel cannot take (not a multiple of 16: it crashes) use the dequantized weight."""
    torch.manual_seed(0)
    w, b, x = torch.randn(48, in_features), torch.randn(48), torch.randn(5, in_features)
    layer = Int8Linear(w, b)
    assert layer.fused is fused
    ref = F.linear(x, w, b)
    assert (layer(x) - ref).abs().max() < 0.02 * ref.abs().max()
    if fused:  # the kernel and the fallback compute the same map (bfloat16 activations aside)
        layer.fused, layer.weight = False, layer.codes.float() * layer.scales.float()[:, None]
        assert (layer(x) - ref).abs().max() < 0.02 * ref.abs().max()


def test_int8_feature_block_tracks_the_float_block():
    """Same block, int8 weights: predicted features within 2 % and the readout's top choice kept
    on nearly every row (the drafter's acceptance, not its exactness, is what int8 can cost)."""
    target = tiny_codec_lm(seed=3, n_codebooks=3, codebook_size=16, coarse_first=True)
    float_heads = tiny_draft_heads(target)
    int8_heads = tiny_draft_heads(target, inference_weights="int8")
    block, block8 = float_heads.block(), int8_heads.block()
    assert isinstance(block8, Int8Block) and not isinstance(block, Int8Block)
    torch.manual_seed(1)
    f, e = torch.randn(200, 64), torch.randn(200, 64)
    with torch.inference_mode():
        ref, got = block(f, e), block8(f, e)
        assert torch.equal(ref, float_heads(f, e)[0])
        assert (got - ref).abs().max() < 0.02 * ref.abs().max()
        head = target.model.heads.weight
        top, top8 = float_heads.readout(head)(ref).argmax(-1), int8_heads.readout(head)(got).argmax(-1)
    assert (top == top8).float().mean() > 0.9


def test_inference_weights_are_checked():
    with pytest.raises(ValueError, match="inference_weights must be one of"):
        DraftHeadsConfig(inference_weights="int4")


@pytest.mark.parametrize("voice", ["voicespec-tiny", "voicespec-tiny-g2"])
def test_the_shipped_feature_drafters_run_int8(voice):
    from voicespec.paths import SHIPPED_VOICES_DIR

    config = DraftHeadsConfig.read(SHIPPED_VOICES_DIR / voice / "drafters" / "feature")
    assert config.kind == "feature" and config.inference_weights == "int8"
