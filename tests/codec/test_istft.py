"""The frame-rate ``IstftDecoder``: overlap-add arithmetic, causality, exact chunked streaming,
persistence, configs, and queued frames. (Training one on a trained encoder: tests/train/test_codec.py.)

Tolerance as in test_seanet.py: chunked output must equal the full decode to ``ATOL`` (measured
max abs error ~6e-8 here: the batched FFT and layer norms round differently per chunk size).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from voicespec.codec.config import CodecConfig

from voicespec.codec.model import Codec
from voicespec.codec.istft import IstftDecoder, IstftStream, overlap_add
from voicespec.frame_blocks import FrameBlocks

ATOL = 2e-6
IRREGULAR = [3, 1, 7, 0, 2, 1, 1, 5, 0, 0, 4, 13, 2, 9]  # as in test_seanet.py
ISTFT = CodecConfig(sample_rate=16000, n_filters=4, ratios=(8, 5, 4, 2), dimension=16, lstm=0, pad_mode="constant",
                    n_q=2, n_codebooks=2, codebook_size=64, decoder="istft", decoder_dim=32, decoder_layers=2)


def _codec(overlap: int = 2, seed: int = 0) -> Codec:
    return Codec.random(dataclasses.replace(ISTFT, decoder_overlap=overlap), seed=seed)


def test_overlap_add_by_hand():
    # 2 frames, overlap 3, hop 1: block k of frame i lands in hop i + k
    blocks = torch.tensor([[[[1.0], [2.0], [3.0]], [[10.0], [20.0], [30.0]]]])
    assert overlap_add(blocks).flatten().tolist() == [1, 12, 23, 30]
    pending = torch.tensor([[[100.0], [200.0]]])
    assert overlap_add(blocks, pending).flatten().tolist() == [101, 212, 23, 30]


@pytest.mark.parametrize("overlap", [1, 2, 3])
@pytest.mark.parametrize("sizes", [[1], [2], [5], IRREGULAR], ids=["1", "2", "5", "irregular"])
def test_chunked_equals_full_decode(overlap, sizes, random_codes, stream):
    codec = _codec(overlap)
    codes = random_codes(codec, 37)
    full = codec.decode(codes)
    assert full.shape == (37 * codec.hop_length,)
    dec = codec.streaming_decoder()
    assert isinstance(dec, IstftStream) and dec.warmup_frames == overlap
    pieces = stream(dec, codes, sizes)
    out = torch.cat(pieces)
    assert out.shape == full.shape and (out - full).abs().max() < ATOL
    assert pieces[-1].numel() == (overlap - 1) * codec.hop_length  # the held-back hops come out on flush
    assert dec.samples_out == full.numel() and dec.frames_in == 37


def test_output_lags_codes_by_overlap_minus_one_frames(random_codes):
    codec, hop = _codec(overlap=3), 320
    codes = random_codes(codec, 10)
    dec = codec.streaming_decoder()
    assert dec.push(codes[:, :2]).numel() == 0
    assert dec.push(codes[:, 2:3]).numel() == hop
    assert dec.push(codes[:, 3:7]).numel() == 4 * hop


@pytest.mark.parametrize("n", [1, 2])
def test_utterance_shorter_than_the_window(n, random_codes, stream):
    codec = _codec(overlap=3)
    codes = random_codes(codec, n)
    out = torch.cat(stream(codec.streaming_decoder(), codes, [1]))
    assert torch.allclose(out, codec.decode(codes), atol=ATOL) and out.numel() == n * codec.hop_length


def test_causal_a_frame_changes_only_its_own_window_and_later():
    torch.manual_seed(0)
    dec, hop, t = IstftDecoder(dimension=16, hop=320, dim=32, layers=2, overlap=2).eval(), 320, 20
    z = torch.randn(1, 16, 30)
    other = z.clone()
    other[..., t] += 1.0
    with torch.no_grad():
        a, b = dec(z)[0, 0], dec(other)[0, 0]
    changed = (a - b).abs().gt(0).nonzero()
    assert int(changed[0]) >= (t - 1) * hop  # frame t's window starts one hop before its own
    assert int(changed[-1]) == a.numel() - 1  # and the change runs on through the causal convolutions


def test_reset_and_abandoned_utterance(random_codes, stream):
    codec = _codec()
    codes = random_codes(codec, 12)
    fresh = torch.cat(stream(codec.streaming_decoder(), codes, [3]))
    dec = codec.streaming_decoder()
    dec.push(codes[:, :5])  # abandoned mid-stream
    dec.reset()
    assert torch.equal(torch.cat(stream(dec, codes, [3])), fresh)
    with pytest.raises(RuntimeError, match="reset"):
        dec.push(codes[:, :1])


def test_saved_and_loaded_with_its_architecture(tmp_path, random_codes):
    codec = _codec(seed=3)
    codes = random_codes(codec, 9)
    codec.save(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    assert cfg["decoder"] == "istft" and cfg["decoder_dim"] == 32
    loaded = Codec.from_folder(tmp_path)
    assert isinstance(loaded.model.decoder, IstftDecoder)
    assert torch.equal(loaded.decode(codes), codec.decode(codes))


def test_configs_without_a_decoder_field_are_seanet():
    d = CodecConfig().to_dict()
    for key in ("decoder", "decoder_dim", "decoder_layers", "decoder_overlap"):
        d.pop(key)
    assert CodecConfig.from_dict(d).decoder == "seanet"
    with pytest.raises(ValueError, match="decoder"):
        CodecConfig(decoder="wavenet")


@pytest.mark.parametrize("decoder", ["istft", "seanet"])
def test_blocks_queue_frames_and_change_no_sample(decoder, random_codes, stream):
    codec = Codec.random(dataclasses.replace(ISTFT, decoder=decoder))
    codes = random_codes(codec, 23)
    full = codec.decode(codes)
    dec = codec.streaming_decoder(3)
    assert dec.push(codes[:, :1]).numel() == 0 and dec.push(codes[:, 1:2]).numel() == 0  # queued
    assert dec.push(codes[:, 2:3]).numel() > 0  # three frames decoded together
    rest = stream(dec, codes[:, 3:], [1, 2, 1, 4])
    dec.reset()
    out = torch.cat(stream(dec, codes, [1, 2, 1, 4]))
    assert out.shape == full.shape and (out - full).abs().max() < ATOL
    with pytest.raises(ValueError, match="first size"):
        codec.streaming_decoder(0)
    assert rest[-1].numel() > 0  # flush decodes what is still queued


@pytest.mark.parametrize("decoder", ["istft", "seanet"])
def test_growing_blocks_decode_at_their_ends_the_same_audio_however_frames_arrive(decoder, random_codes):
    """Blocks of 2, 4, 8, 8: audio comes out when frames 2, 6, 14 and 22 arrive, equal to the full
    decode, and bit for bit the same whether the frames came one by one or in uneven chunks."""
    codec = Codec.random(dataclasses.replace(ISTFT, decoder=decoder))
    codes = random_codes(codec, 25)
    full = codec.decode(codes)
    dec = codec.streaming_decoder(FrameBlocks(2, 8))
    one_by_one = [dec.push(codes[:, t: t + 1]) for t in range(25)]
    assert [t + 1 for t, pcm in enumerate(one_by_one) if pcm.numel()] == [2, 6, 14, 22]
    one_by_one.append(dec.flush())
    out = torch.cat(one_by_one)
    assert out.shape == full.shape and (out - full).abs().max() < ATOL
    dec.reset()
    uneven, t = [], 0
    for n in (3, 5, 1, 9, 7):
        uneven.append(dec.push(codes[:, t: t + n]))
        t += n
    assert torch.equal(torch.cat(uneven + [dec.flush()]), out)


@pytest.mark.parametrize("blocks", [1, 2, 4, FrameBlocks(2, 8)])
def test_streams_decoded_together_give_each_its_own_audio_bit_for_bit(blocks, random_codes):
    """The server decodes every session's new frames in one batched call (``push_many``): each
    stream's PCM is exactly what it decodes alone, whoever shares the call (batch sizes 1-5, and
    fresh streams beside warm ones). Its linears run one GEMM per batch row (``rowwise_linear``):
    one GEMM over every row rounded by the batch's row count, ±1 LSB in the 16-bit audio."""
    codec = _codec(seed=3)
    codes = [random_codes(codec, 24) for _ in range(5)]
    alone = []
    for c in codes:
        dec = codec.streaming_decoder(blocks)
        alone.append(torch.cat([dec.push(c[:, t: t + 2]) for t in range(0, 24, 2)] + [dec.flush()]))
    streams = [codec.streaming_decoder(blocks) for _ in codes]
    got: list[list[torch.Tensor]] = [[] for _ in codes]
    for t in range(0, 24, 2):
        live = [i for i in range(5) if t >= 2 * i]  # stream i joins at frame 2i: batches of 1 to 5
        for i, pcm in zip(live, IstftStream.push_many([streams[i] for i in live], [codes[i][:, t - 2 * i: t - 2 * i + 2] for i in live])):
            got[i].append(pcm)
    for i in range(5):
        rest = [streams[i].push(codes[i][:, t: t + 2]) for t in range(24 - 2 * i, 24, 2)]
        assert torch.equal(torch.cat(got[i] + rest + [streams[i].flush()]), alone[i]), i
