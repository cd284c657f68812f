"""The SEANet ``StreamingDecoder``: chunked decoding equals one full ``Codec.decode``.

Tolerance: outputs must match the full decode to ``ATOL = 2e-6`` absolute (random-weight outputs
peak around 0.1-0.2). Measured on CPU (torch 2.9.1, 1 thread): max abs error <= ~1.5e-7 for every
chunk size and codec here — float rounding only (different summation order in the transposed
convs' overlap-add and in the written-out LSTM recurrence); lengths are always exactly ``T * hop``.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from encodec import EncodecModel
from encodec.modules import SConv1d, SEANetDecoder

from voicespec.codec.config import CodecConfig

from voicespec.codec.model import Codec
from voicespec.codec.seanet import StreamingDecoder

ATOL = 2e-6
SMALL = CodecConfig(n_filters=8, ratios=(8, 6, 5, 2), lstm=0, pad_mode="constant", n_q=4, n_codebooks=4, dimension=32)
# reflect padding + LSTM + dilated second residual layer, at toy size
SMALL_REFLECT = CodecConfig(n_filters=4, ratios=(4, 2), lstm=1, pad_mode="reflect", n_q=2, n_codebooks=2,
                            dimension=16, n_residual_layers=2, codebook_size=64, sample_rate=8000)
IRREGULAR = [3, 1, 7, 0, 2, 1, 1, 5, 0, 0, 4, 13, 2, 9]  # chunk sizes, empty pushes among them


@pytest.fixture(scope="module")
def cases(random_codes):
    """name -> (codec, codes, full decode). 24 kHz: 1 s of codes; small ones ~1.2 s."""
    out = {}
    for name, cfg, n in [("24khz", CodecConfig(), 75), ("small", SMALL, 60), ("small_reflect", SMALL_REFLECT, 40)]:
        codec = Codec.random(cfg)
        codes = random_codes(codec, n)
        out[name] = (codec, codes, codec.decode(codes))
    return out


@pytest.mark.parametrize("name", ["24khz", "small", "small_reflect"])
@pytest.mark.parametrize("sizes", [[1], [2], [5], [13], IRREGULAR], ids=["1", "2", "5", "13", "irregular"])
def test_chunked_equals_full_decode(cases, name, sizes, stream):
    codec, codes, ref = cases[name]
    dec = codec.streaming_decoder()
    pieces = stream(dec, codes, sizes)
    out = torch.cat(pieces)
    assert all(p.dtype == torch.float32 and p.ndim == 1 for p in pieces)
    assert out.shape == ref.shape == (codes.shape[1] * codec.hop_length,)
    assert dec.samples_out == out.shape[0]
    err = (out - ref).abs().max().item()
    assert err < ATOL, f"{name} chunks {sizes}: max abs error {err:.3g}"


@pytest.mark.parametrize("name, warmup", [("24khz", 7), ("small", 1), ("small_reflect", 7)])
def test_warmup_holds_back_then_streams_whole_chunks(cases, name, warmup):
    codec, codes, _ = cases[name]
    dec = StreamingDecoder(codec)
    assert dec.warmup_frames == warmup
    for i in range(warmup - 1):
        assert dec.push(codes[:, i: i + 1]).numel() == 0
    assert dec.push(codes[:, warmup - 1: warmup]).numel() == warmup * codec.hop_length
    assert dec.push(codes[:, warmup: warmup + 3]).numel() == 3 * codec.hop_length
    assert dec.push(codes[:, :0]).numel() == 0
    assert dec.flush().numel() == 0  # nothing held back once warm


def test_warmup_is_computed_from_the_layers(random_codes, stream):
    """A reflect decoder whose first conv has kernel 3 needs 3 frames, not the usual 7."""
    cfg = CodecConfig(n_filters=4, ratios=(2, 2), lstm=0, n_q=2, n_codebooks=2, dimension=8, codebook_size=16)
    codec = Codec.random(cfg)
    with torch.random.fork_rng():
        torch.manual_seed(3)
        codec.model.decoder = SEANetDecoder(channels=1, dimension=8, n_filters=4, ratios=[2, 2], kernel_size=3,
                                            causal=True, pad_mode="reflect", lstm=0).eval()
    dec = StreamingDecoder(codec)
    assert dec.warmup_frames == 3
    codes = random_codes(codec, 20)
    for sizes in ([1], [2], IRREGULAR):
        dec.reset()
        out = torch.cat(stream(dec, codes, sizes))
        assert (out - codec.decode(codes)).abs().max() < ATOL
    for n in (1, 2):  # shorter than the warm-up
        dec.reset()
        out = torch.cat(stream(dec, codes[:, :n], [1]))
        assert (out - codec.decode(codes[:, :n])).abs().max() < ATOL


@pytest.mark.parametrize("name, lengths", [("24khz", [1, 3, 6, 7]), ("small_reflect", [1, 2, 5, 6]), ("small", [1])])
def test_utterance_shorter_than_warmup(cases, name, lengths, stream):
    codec, codes, _ = cases[name]
    dec = codec.streaming_decoder()
    for n in lengths:
        dec.reset()
        short = codes[:, :n]
        out = torch.cat(stream(dec, short, [2]))
        ref = codec.decode(short)
        assert out.shape == ref.shape == (n * codec.hop_length,)
        assert (out - ref).abs().max() < ATOL
        assert dec.samples_out == n * codec.hop_length
    dec.reset()
    assert dec.flush().numel() == 0  # empty utterance


@pytest.mark.parametrize("name, sizes", [("24khz", [1]), ("24khz", [5]), ("small", [2]), ("small_reflect", IRREGULAR)])
def test_no_clicks_at_chunk_joins(cases, name, sizes, stream):
    """Sample-to-sample jumps across chunk joins equal the full decode's there, and are no
    larger than the jumps inside chunks."""
    codec, codes, ref = cases[name]
    pieces = stream(codec.streaming_decoder(), codes, sizes)
    out = torch.cat(pieces)
    joins = torch.cumsum(torch.tensor([p.numel() for p in pieces if p.numel()]), 0)[:-1]  # first sample of a piece
    assert joins.numel() >= 3
    jumps, ref_jumps = out.diff().abs(), ref.diff().abs()
    at_joins = jumps[joins - 1]
    assert (at_joins - ref_jumps[joins - 1]).abs().max() < 2 * ATOL
    inside = torch.ones_like(jumps, dtype=torch.bool)
    inside[joins - 1] = False
    assert at_joins.max() <= 1.5 * jumps[inside].max()


@pytest.mark.slow
def test_reset_gives_a_fresh_decoder(cases, stream):
    codec, codes, _ = cases["24khz"]
    a, b = codes[:, :40], codes[:, 40:]
    fresh = torch.cat(stream(StreamingDecoder(codec), b, [3]))
    dec = StreamingDecoder(codec)
    stream(dec, a, [2])  # whole first utterance
    dec.reset()
    assert dec.samples_out == 0
    assert torch.equal(torch.cat(stream(dec, b, [3])), fresh)
    dec.reset()
    dec.push(a[:, :20])  # abandoned half-way (state mid-stream), no flush
    dec.reset()
    assert torch.equal(torch.cat(stream(dec, b, [3])), fresh)


def test_push_after_flush_needs_reset(cases, stream):
    codec, codes, _ = cases["small"]
    dec = codec.streaming_decoder()
    stream(dec, codes[:, :5], [1])
    with pytest.raises(RuntimeError, match="reset"):
        dec.push(codes[:, 5:6])
    assert dec.flush().numel() == 0
    dec.reset()
    assert dec.push(codes[:, :1]).numel() == codec.hop_length


@pytest.mark.parametrize("bad", ["wrong_k", "negative", "too_big", "one_dim"])
def test_bad_codes_raise_and_leave_state_alone(cases, bad, stream):
    codec, codes, ref = cases["small"]
    dec = codec.streaming_decoder()
    first = dec.push(codes[:, :4])
    bad_codes = {
        "wrong_k": codes[:-1, 4:6],
        "negative": torch.full((codec.n_codebooks, 2), -1),
        "too_big": torch.full((codec.n_codebooks, 2), codec.codebook_size),
        "one_dim": codes[0, 4:6],
    }[bad]
    with pytest.raises(ValueError):
        dec.push(bad_codes)
    rest = torch.cat(stream(dec, codes[:, 4:], [3]))
    assert (torch.cat([first, rest]) - ref).abs().max() < ATOL


def _small_codec() -> Codec:
    return Codec.random(SMALL)


def test_unsupported_layers_raise_at_construction():
    with pytest.raises(ValueError, match="non-causal"):
        StreamingDecoder(Codec.random(dataclasses.replace(SMALL, causal=False)))
    codec = _small_codec()
    first = codec.model.decoder.model[0]
    codec.model.decoder.model[0] = SConv1d(first.conv.conv.in_channels, first.conv.conv.out_channels, 4, stride=2,
                                           causal=True, norm="weight_norm", pad_mode="constant")
    with pytest.raises(ValueError, match="stride"):
        StreamingDecoder(codec)
    codec = _small_codec()
    codec.model.decoder.model[0].pad_mode = "circular"
    with pytest.raises(ValueError, match="pad_mode"):
        StreamingDecoder(codec)
    codec = _small_codec()
    codec.model.decoder.model[1] = torch.nn.GroupNorm(1, codec.model.decoder.model[0].conv.conv.out_channels)
    with pytest.raises(ValueError, match="GroupNorm"):
        StreamingDecoder(codec)
    codec = _small_codec()
    codec.model.segment = 1.0
    with pytest.raises(ValueError, match="segment"):
        StreamingDecoder(codec)


def test_weights_loaded_from_a_folder(tmp_path, random_codes, stream):
    """``from_folder`` loads weight_g/weight_v: the weight_norm ``.weight`` is stale until a
    forward runs. The streaming decoder, built before any decode, must still use the loaded weights."""
    src = Codec.random(SMALL, seed=5)
    codes = random_codes(src, 12)
    ref = src.decode(codes)
    src.save(tmp_path)
    loaded = Codec.from_folder(tmp_path)
    out = torch.cat(stream(loaded.streaming_decoder(), codes, [1]))
    assert (out - ref).abs().max() < ATOL


def test_codec_streaming_decoder():
    assert isinstance(_small_codec().streaming_decoder(), StreamingDecoder)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_full_decode(random_codes, stream):
    """Not run here (no GPU on the machine these tests were written on). TF32 off so that both
    sides compute in float32."""
    codec = Codec.random(CodecConfig(), device="cuda")
    codes = random_codes(codec, 75)
    with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
        ref = codec.decode(codes)
        for sizes in ([1], [5], IRREGULAR):
            out = torch.cat(stream(codec.streaming_decoder(), codes, sizes))
            assert out.shape == ref.shape and (out - ref).abs().max() < 1e-4


def test_encodec_model_untouched_by_streaming(cases, stream):
    """Streaming must not change the codec: full decode after streaming is unchanged."""
    codec, codes, ref = cases["small"]
    stream(codec.streaming_decoder(), codes, [1])
    assert isinstance(codec.model, EncodecModel)
    assert torch.equal(codec.decode(codes), ref)
