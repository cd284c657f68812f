"""The codec training recipe end to end on tiny settings: train, resume, export, ship; start from
an exported codec; decoder-only runs keep every code; a fresh istft decoder on a trained encoder.

Every run is bounded by a step count (``max_steps``), not by wall time, so what it trains is the
same on any machine; ``minutes`` is set far beyond what those steps take.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import soundfile as sf
import torch

from voicespec.cli import main
from voicespec.codec.istft import IstftDecoder
from voicespec.codec.config import CodecConfig
from voicespec.codec.model import Codec
from voicespec.train.card import ship_codec
from voicespec.train.configs import TrainConfig
from voicespec.train.codec import _start_from, train_codec

TINY_CODEC = CodecConfig(sample_rate=16000, n_filters=4, ratios=(4, 4, 2), dimension=8, lstm=0, pad_mode="constant",
                         n_q=2, n_codebooks=2, codebook_size=16)


QUIET = dict(log=lambda s: None)
# minutes: a time budget no run here comes near; max_steps bounds each run
TINY_RUN = TrainConfig(minutes=5.0, max_steps=3, batch_size=2, segment_s=0.25, eval_every_steps=1000, eval_clips=1)


def _steps(folder) -> int:
    return Codec.from_folder(folder).config.extra["training"]["steps"]


def _fake_corpus(folder, n=6, sr=24000):
    (folder / "wav").mkdir(parents=True)
    lines = []
    for i in range(n):
        t = torch.arange(sr) / sr
        x = 0.3 * torch.sin(2 * math.pi * (120 + 40 * i) * t)
        sf.write(str(folder / "wav" / f"u{i}.wav"), x.numpy(), sr)
        lines.append(json.dumps({"id": f"u{i}", "split": "heldout" if i == 0 else "train"}))
    (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.slow
def test_training_runs_resumes_and_exports(tmp_path):
    _fake_corpus(tmp_path / "data")
    codec_config = TINY_CODEC
    config = dataclasses.replace(TINY_RUN, max_steps=6, eval_every_steps=5, checkpoint_every_s=0.5)
    out = tmp_path / "run"
    folder = train_codec(tmp_path / "data", out, codec_config, config, **QUIET)
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state["step"] == 6 and 0 < state["trained_s"] < 60 * config.minutes  # the step budget stopped it
    codec = Codec.from_folder(folder)
    assert codec.sample_rate == 16000 and codec.n_codebooks == 2
    extra = codec.config.extra
    assert extra["training"]["steps"] == 6 and "log_mel_l1" in extra["heldout_metrics"]
    assert extra["training"]["train_config"]["max_steps"] == 6
    assert " CPU " in extra["training"]["hardware"]  # where it trained, recorded with the checkpoint
    assert codec.encode(torch.zeros(1600)).shape == (2, 50)

    shipped = ship_codec(folder, tmp_path / "data", tmp_path / "ship", tmp_path / "samples", "voicespec train codec ...")
    card = (shipped / "MODEL_CARD.md").read_text()
    assert "Steps: 6" in card and "CC0" in card and "log_mel_l1" in card
    shipped_extra = Codec.from_folder(shipped).config.extra
    assert shipped_extra["training"] == extra["training"]  # measured again where it ships, on the corpus given:
    assert shipped_extra["heldout_metrics"].keys() == extra["heldout_metrics"].keys()
    assert " CPU " in shipped_extra["measured_on"] and shipped_extra["heldout_clips"] == 1
    assert "first\n1 held-out clips" in card
    assert (tmp_path / "samples" / "codec-mels.png").stat().st_size > 0
    assert len(list((tmp_path / "samples").glob("codec-u0-*.wav"))) == 2

    # A bigger step budget resumes from the checkpoint instead of starting over.
    logs: list[str] = []
    train_codec(tmp_path / "data", out, codec_config, dataclasses.replace(config, max_steps=10), log=logs.append)
    assert any(line.startswith("resumed at step 6 ") for line in logs)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 10
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "heldout" in r] == [5, 10]  # evaluated every 5 steps, across the resume


@pytest.mark.slow
def test_a_new_run_can_start_from_an_exported_codec(tmp_path):
    _fake_corpus(tmp_path / "data")
    first = train_codec(tmp_path / "data", tmp_path / "a", TINY_CODEC, TINY_RUN, **QUIET)
    assert _steps(first) == 3
    second = train_codec(tmp_path / "data", tmp_path / "b", TINY_CODEC, dataclasses.replace(TINY_RUN, max_steps=5),
                         init_from=first, **QUIET)
    assert _steps(second) == 5  # the start's 3 steps count towards the budget: it trained 2 more


@pytest.mark.slow
def test_decoder_only_training_keeps_every_code(tmp_path):
    """The LM speaks the codec's codes: a decoder-only run may improve the sound, never the tokens."""
    _fake_corpus(tmp_path / "data")
    first = train_codec(tmp_path / "data", tmp_path / "a", TINY_CODEC, TINY_RUN, **QUIET)
    tuned = train_codec(tmp_path / "data", tmp_path / "b", TINY_CODEC,
                        dataclasses.replace(TINY_RUN, max_steps=8, decoder_only=True), init_from=first, **QUIET)
    assert _steps(tuned) == 8
    a, b = Codec.from_folder(first), Codec.from_folder(tuned)
    x = torch.randn(16000) * 0.1
    assert torch.equal(a.encode(x), b.encode(x))
    codes = a.encode(x)
    assert not torch.allclose(a.decode(codes), b.decode(codes))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_runs_export_codecs_that_load_and_match_on_the_cpu(tmp_path):
    _fake_corpus(tmp_path / "data")
    config = dataclasses.replace(TINY_RUN, eval_every_steps=3, device="cuda")
    first = train_codec(tmp_path / "data", tmp_path / "a", TINY_CODEC, config, **QUIET)
    tuned = train_codec(tmp_path / "data", tmp_path / "b", TINY_CODEC,
                        dataclasses.replace(config, max_steps=6, decoder_only=True), init_from=first, **QUIET)
    a, b = Codec.from_folder(first), Codec.from_folder(tuned)
    assert "CUDA" in a.config.extra["training"]["hardware"]
    x = torch.randn(16000) * 0.1
    assert torch.equal(a.encode(x), b.encode(x))
    assert torch.equal(Codec.from_folder(first, device="cuda").encode(x), a.encode(x))


# --- the istft decoder -----------------------------------------------------------------------------


@pytest.mark.slow
def test_fresh_istft_decoder_on_a_trained_encoder_keeps_every_code(tmp_path):
    """The shipped recipe on tiny settings: a SEANet codec, then `train codec --init-from it
    --decoder istft --decoder-only` and `train ship-codec`, through the command line."""
    _fake_corpus(tmp_path / "data")
    first = train_codec(tmp_path / "data", tmp_path / "a", TINY_CODEC, TINY_RUN, **QUIET)
    istft = dataclasses.replace(TINY_CODEC, decoder="istft", decoder_dim=32, decoder_layers=2)
    _, cfg, step, trained_s, provenance = _start_from(first, istft, log=lambda s: None)
    assert cfg.decoder == "istft" and step == 0 and trained_s == 0.0
    assert provenance["encoder_from"]["steps"] == 3
    run = tmp_path / "b"
    assert main(["train", "codec", "--data", str(tmp_path / "data"), "--out", str(run), "--init-from", str(first),
                 "--decoder", "istft", "--decoder-dim", "32", "--decoder-layers", "2", "--decoder-only",
                 "--minutes", "5", "--max-steps", "4", "--batch-size", "2", "--segment-s", "0.25",
                 "--eval-every", "1000"]) == 0
    a, b = Codec.from_folder(first), Codec.from_folder(run / "codec")
    assert isinstance(b.model.decoder, IstftDecoder) and b.config.decoder_dim == 32
    x = torch.randn(16000) * 0.1
    assert torch.equal(a.encode(x), b.encode(x))
    training = b.config.extra["training"]
    assert training["train_config"]["decoder_only"] and training["encoder_from"]["folder"] == str(first)
    assert training["steps"] == 4 and training["train_config"]["max_steps"] == 4  # a fresh decoder counts from 0

    dest, samples = tmp_path / "ship" / "codec", tmp_path / "samples"
    assert main(["train", "ship-codec", "--codec", str(run / "codec"), "--data", str(tmp_path / "data"),
                 "--dest", str(dest), "--samples", str(samples), "--command", "voicespec train codec ..."]) == 0
    card = (dest / "MODEL_CARD.md").read_text()
    assert "istft: 2 causal ConvNeXt blocks x 32" in card and "Encoder and quantizer: frozen" in card
    assert f"Steps: {training['steps']}" in card
    shipped = Codec.from_folder(dest).config
    assert dataclasses.replace(shipped, extra={}) == dataclasses.replace(b.config, extra={})
    assert shipped.extra["training"] == training  # the metrics are measured again where it ships
    assert (samples / "codec-mels.png").stat().st_size > 0


@pytest.mark.slow
def test_a_whole_codec_trains_with_the_istft_decoder(tmp_path):
    _fake_corpus(tmp_path / "data")
    cfg = dataclasses.replace(TINY_CODEC, decoder="istft", decoder_dim=32, decoder_layers=2)
    codec = Codec.from_folder(train_codec(tmp_path / "data", tmp_path / "run", cfg, TINY_RUN, **QUIET))
    assert isinstance(codec.model.decoder, IstftDecoder) and codec.config.extra["training"]["steps"] == 3
    assert codec.decode(codec.encode(torch.randn(1600) * 0.1)).shape == (1600,)


@pytest.mark.slow
def test_adversarial_decoder_training_keeps_every_code_and_resumes_both_players(tmp_path):
    """`--adversarial`: the discriminators train beside the decoder, ride in the checkpoint (a resume
    continues them), are never exported, and every code stays what it was."""
    _fake_corpus(tmp_path / "data")
    first = train_codec(tmp_path / "data", tmp_path / "a", TINY_CODEC, TINY_RUN, **QUIET)
    config = dataclasses.replace(TINY_RUN, max_steps=5, decoder_only=True, adversarial=True, judged_s=0.1)
    run = tmp_path / "b"
    logs: list[str] = []
    tuned = train_codec(tmp_path / "data", run, TINY_CODEC, config, init_from=first, log=logs.append)
    state = torch.load(run / "checkpoint.pt", weights_only=False)
    assert set(state["adversary"]) == {"model", "optimizer"} and state["step"] == 5
    disc_before = {k: v.clone() for k, v in state["adversary"]["model"].items()}
    a, b = Codec.from_folder(first), Codec.from_folder(tuned)
    assert not any("subs" in k for k in b.model.state_dict())  # only the generator ships
    x = torch.randn(16000) * 0.1
    assert torch.equal(a.encode(x), b.encode(x))
    assert not torch.allclose(a.decode(a.encode(x)), b.decode(a.encode(x)))

    train_codec(tmp_path / "data", run, TINY_CODEC, dataclasses.replace(config, max_steps=7), log=logs.append)
    resumed = torch.load(run / "checkpoint.pt", weights_only=False)
    assert any(line.startswith("resumed at step 5 ") for line in logs) and resumed["step"] == 7
    assert resumed["adversary"]["optimizer"]["state"][0]["step"] == 2 + state["adversary"]["optimizer"]["state"][0]["step"]
    assert any(not torch.equal(disc_before[k], v) for k, v in resumed["adversary"]["model"].items())
    shipped = ship_codec(tuned, tmp_path / "data", tmp_path / "ship", tmp_path / "samples", "voicespec train codec ...",
                         previous=first)
    card = (shipped / "MODEL_CARD.md").read_text()
    assert "least-squares adversarial" in card and "| metric | this decoder | the decoder it replaced |" in card
    assert Codec.from_folder(shipped).config.extra["previous_heldout_metrics"].keys() == \
        Codec.from_folder(shipped).config.extra["heldout_metrics"].keys()
    assert sorted(p.name for p in (tmp_path / "samples").iterdir()) == [
        "codec-mels.png", "codec-u0-previous.wav", "codec-u0-resynth.wav", "codec-u0-teacher.wav"]
    with pytest.raises(ValueError, match="decoder-only"):
        train_codec(tmp_path / "data", tmp_path / "c", TINY_CODEC, dataclasses.replace(config, decoder_only=False),
                    init_from=first, **QUIET)
    # A codec that encodes other codes cannot replace one: the voices' LMs speak the old codes.
    Codec.random(a.config, seed=5).save(tmp_path / "other")
    with pytest.raises(ValueError, match="encodes other codes"):
        ship_codec(tmp_path / "other", tmp_path / "data", tmp_path / "ship2", tmp_path / "samples2", "...", previous=first)
