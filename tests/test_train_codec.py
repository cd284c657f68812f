"""The codec training recipe: VQ fixes, and an end-to-end run on tiny settings."""

from __future__ import annotations

import json
import math

import pytest
import soundfile as sf
import torch
from encodec.quantization.core_vq import EuclideanCodebook
from encodec.quantization.core_vq import kmeans as encodec_kmeans

from voicespec.codec.model import Codec, CodecConfig
from voicespec.train.card import ship_codec
from voicespec.train.codec import TrainConfig, train_codec
from voicespec.train.vq import FixedEuclideanCodebook, kmeans, patch_codebooks


TINY_CODEC = CodecConfig(sample_rate=16000, n_filters=4, ratios=(4, 4, 2), dimension=8, lstm=0, pad_mode="constant",
                         n_q=2, n_codebooks=2, codebook_size=16)


def _dead_codebook(cls):
    """A trained-looking codebook whose codes 4.. have never been used (cluster size 0)."""
    torch.manual_seed(0)
    cb = EuclideanCodebook(dim=4, codebook_size=8, kmeans_init=False, threshold_ema_dead_code=2)
    cb.__class__ = cls
    cb.embed.data[:4] = torch.eye(4)
    cb.embed.data[4:] = 100.0  # far away from any data: never chosen
    cb.embed_avg.data.copy_(cb.embed * 10)
    cb.cluster_size.data[:4] = 10.0
    cb.cluster_size.data[4:] = 0.0
    return cb.train()


def test_dead_codes_are_revived_by_the_fix_and_not_by_encodec():
    data = torch.randn(1, 256, 4)
    broken = _dead_codebook(EuclideanCodebook)
    broken(data)
    assert (broken.embed[4:] > 50).all(), "encodec 0.1.1 loses the replacement (the bug this fixes)"

    fixed = _dead_codebook(FixedEuclideanCodebook)
    fixed(data)
    revived = fixed.embed[4:]
    assert (revived.abs() < 10).all()
    # Each revived code is one of the batch vectors, and it is used on the next batch.
    dists = torch.cdist(revived, data[0]).min(dim=1).values
    assert (dists < 1e-2).all()  # up to the EMA's Laplace smoothing
    _, used = fixed(data)
    assert int((used >= 4).sum()) > 0


def test_fast_kmeans_matches_encodec_kmeans():
    samples = torch.randn(500, 8)
    torch.manual_seed(1)
    ours, our_bins = kmeans(samples, 16, 5)
    torch.manual_seed(1)
    theirs, their_bins = encodec_kmeans(samples, 16, 5)
    assert torch.allclose(ours, theirs, atol=1e-5) and torch.equal(our_bins, their_bins)


def test_patch_codebooks_switches_every_codebook():
    codec = Codec.random(CodecConfig(n_filters=4, ratios=(4, 2), dimension=8, lstm=0, n_q=3, n_codebooks=2, codebook_size=16))
    assert patch_codebooks(codec.model) == 3
    assert all(type(m) is not EuclideanCodebook for m in codec.model.modules())


def _fake_corpus(folder, n=6, sr=24000):
    (folder / "wav").mkdir(parents=True)
    lines = []
    for i in range(n):
        t = torch.arange(sr) / sr
        x = 0.3 * torch.sin(2 * math.pi * (120 + 40 * i) * t)
        sf.write(str(folder / "wav" / f"u{i}.wav"), x.numpy(), sr)
        lines.append(json.dumps({"id": f"u{i}", "split": "heldout" if i == 0 else "train"}))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")


def test_training_runs_resumes_and_exports(tmp_path):
    _fake_corpus(tmp_path / "data")
    codec_config = TINY_CODEC
    config = TrainConfig(minutes=0.02, batch_size=2, segment_s=0.25, eval_every_steps=5, checkpoint_every_s=0.5, eval_clips=1)
    out = tmp_path / "run"
    folder = train_codec(tmp_path / "data", out, codec_config, config, log=lambda s: None)
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    first_steps = state["step"]
    assert first_steps > 0 and state["trained_s"] >= 0.02 * 60
    codec = Codec.from_folder(folder)
    assert codec.sample_rate == 16000 and codec.n_codebooks == 2
    extra = codec.config.extra
    assert extra["training"]["steps"] == first_steps and "log_mel_l1" in extra["heldout_metrics"]
    assert " CPU " in extra["training"]["hardware"]  # where it trained, recorded with the checkpoint
    assert codec.encode(torch.zeros(1600)).shape == (2, 50)

    shipped = ship_codec(folder, tmp_path / "data", tmp_path / "ship", tmp_path / "samples", "voicespec train codec ...")
    card = (shipped / "MODEL_CARD.md").read_text()
    assert f"Steps: {first_steps}" in card and "CC0" in card and "log_mel_l1" in card
    shipped_extra = Codec.from_folder(shipped).config.extra
    assert shipped_extra["training"] == extra["training"]  # measured again where it ships, on the corpus given:
    assert shipped_extra["heldout_metrics"].keys() == extra["heldout_metrics"].keys()
    assert " CPU " in shipped_extra["measured_on"] and shipped_extra["heldout_clips"] >= 1
    assert f"first\n{shipped_extra['heldout_clips']} held-out clips" in card
    assert (tmp_path / "samples" / "codec-mels.png").stat().st_size > 0
    assert len(list((tmp_path / "samples").glob("codec-u0-*.wav"))) == 2

    # A bigger budget resumes from the checkpoint instead of starting over.
    train_codec(tmp_path / "data", out, codec_config, TrainConfig(**{**config.__dict__, "minutes": 0.03}), log=lambda s: None)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] > first_steps
    assert any("heldout" in json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines())


def test_a_new_run_can_start_from_an_exported_codec(tmp_path):
    _fake_corpus(tmp_path / "data")
    codec_config = TINY_CODEC
    config = TrainConfig(minutes=0.01, batch_size=2, segment_s=0.25, eval_every_steps=1000, eval_clips=1)
    first = train_codec(tmp_path / "data", tmp_path / "a", codec_config, config, log=lambda s: None)
    steps = Codec.from_folder(first).config.extra["training"]["steps"]
    second = train_codec(tmp_path / "data", tmp_path / "b", codec_config, TrainConfig(**{**config.__dict__, "minutes": 0.02}),
                         log=lambda s: None, init_from=first)
    assert Codec.from_folder(second).config.extra["training"]["steps"] > steps


def test_decoder_only_training_keeps_every_code(tmp_path):
    """The LM speaks the codec's codes: a decoder-only run may improve the sound, never the tokens."""
    _fake_corpus(tmp_path / "data")
    codec_config = TINY_CODEC
    config = TrainConfig(minutes=0.01, batch_size=2, segment_s=0.25, eval_every_steps=1000, eval_clips=1)
    first = train_codec(tmp_path / "data", tmp_path / "a", codec_config, config, log=lambda s: None)
    tuned = train_codec(tmp_path / "data", tmp_path / "b", codec_config,
                        TrainConfig(**{**config.__dict__, "minutes": 0.03, "decoder_only": True}),
                        log=lambda s: None, init_from=first)
    a, b = Codec.from_folder(first), Codec.from_folder(tuned)
    x = torch.randn(16000) * 0.1
    assert torch.equal(a.encode(x), b.encode(x))
    codes = a.encode(x)
    assert not torch.allclose(a.decode(codes), b.decode(codes))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_runs_export_codecs_that_load_and_match_on_the_cpu(tmp_path):
    _fake_corpus(tmp_path / "data")
    config = TrainConfig(minutes=0.01, batch_size=2, segment_s=0.25, eval_every_steps=3, eval_clips=1, device="cuda")
    first = train_codec(tmp_path / "data", tmp_path / "a", TINY_CODEC, config, log=lambda s: None)
    tuned = train_codec(tmp_path / "data", tmp_path / "b", TINY_CODEC,
                        TrainConfig(**{**config.__dict__, "minutes": 0.02, "decoder_only": True}),
                        log=lambda s: None, init_from=first)
    a, b = Codec.from_folder(first), Codec.from_folder(tuned)
    assert "CUDA" in a.config.extra["training"]["hardware"]
    x = torch.randn(16000) * 0.1
    assert torch.equal(a.encode(x), b.encode(x))
    assert torch.equal(Codec.from_folder(first, device="cuda").encode(x), a.encode(x))
