"""The recognizer's training recipe: length-bucketed batches, an end-to-end run bounded by steps
(resume, export, load) on a tiny fake corpus, and the command line."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest
import torch

import voicespec.train.asr as asr_recipe
from voicespec.eval.recognizer import AsrConfig, CtcAsr, transcribe
from voicespec.frontend.text import DEFAULT_ALPHABET
from voicespec.train.configs import ENCODERS, AsrTrainConfig
from voicespec.train.asr import length_batches, train_asr


def test_length_batches_cover_each_item_once_within_budget():
    lengths = [random.Random(i).randrange(10, 100) for i in range(50)] + [500]
    batches = length_batches(lengths, 300, random.Random(0))
    assert sorted(i for b in batches for i in b) == list(range(51))
    for b in batches:
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 300


def test_training_runs_resumes_exports_and_loads(tmp_path, speech_corpus, tiny_asr_config):
    speech_corpus(tmp_path / "data")
    # a step budget, not a time budget: the same run on any machine
    config = AsrTrainConfig(minutes=5.0, max_steps=4, batch_seconds=2.0, warmup_steps=2, eval_every_steps=3,
                            log_every_steps=1, checkpoint_every_s=0.2, stats_utterances=4)
    out = tmp_path / "run"
    folder = train_asr(tmp_path / "data", out, config, tiny_asr_config, log=lambda s: None)
    state = torch.load(out / "checkpoint.pt", weights_only=False)
    assert state["step"] == 4 and 0 < state["trained_s"] < 60 * config.minutes
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == [1, 2, 3, 4]
    assert [r["step"] for r in records if "cer" in r.get("heldout", {})] == [3]

    model = CtcAsr.from_folder(folder)
    extra = model.config.extra
    assert extra["training"]["steps"] == 4 and "cer" in extra["heldout_metrics"]
    assert extra["training"]["recipe"] == "voicespec train asr" and extra["training"]["train_config"]["max_steps"] == 4
    assert not torch.equal(model.feat_std, torch.ones(80))  # normalization measured on the corpus
    text = transcribe(model, torch.zeros(24000), 24000)
    assert set(text) <= set(DEFAULT_ALPHABET)

    # A bigger step budget resumes from the checkpoint instead of starting over.
    logs: list[str] = []
    train_asr(tmp_path / "data", out, replace(config, max_steps=7), tiny_asr_config, log=logs.append)
    assert any(line.startswith("resumed at step 4 ") for line in logs)
    assert torch.load(out / "checkpoint.pt", weights_only=False)["step"] == 7
    records = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if "loss" in r] == list(range(1, 8))
    assert [r["step"] for r in records if "cer" in r.get("heldout", {})] == [3, 6]


def test_cli_registers_train_asr(monkeypatch):
    from voicespec.cli import build_parser

    argv = ["train", "asr", "--data", "d", "--out", "o", "--minutes", "5"]
    args = build_parser().parse_args(argv)
    assert args.minutes == 5.0 and args.data == "d" and args.encoder == "gru"  # args.func reaches run_asr: below
    assert args.max_steps == 0  # no step budget unless asked
    argv = ["train", "asr", "--data", "d", "--out", "o", "--max-steps", "40"]
    args = build_parser().parse_args(argv)
    seen = []

    def fake_train(data, out, config, model_config, log=print):
        seen.append(config)
        raise KeyboardInterrupt  # stop before anything is written

    monkeypatch.setattr(asr_recipe, "train_asr", fake_train)
    with pytest.raises(KeyboardInterrupt):
        args.func(args)
    assert seen[0].max_steps == 40 and seen[0].minutes == AsrTrainConfig.minutes
    argv = ["train", "asr", "--data", "d", "--out", "o", "--encoder", "transformer"]
    args = build_parser().parse_args(argv)
    assert args.encoder == "transformer"
    assert 1e6 < CtcAsr(AsrConfig(**ENCODERS["gru"])).n_params() < 3e6
    assert 1e6 < CtcAsr(AsrConfig(**ENCODERS["transformer"])).n_params() < 3e6
