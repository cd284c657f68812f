"""Training the duration predictor: item checks and metrics, a tiny end-to-end run bounded by steps
(resume, export, load, predict) on synthetic items, and the command line."""

from __future__ import annotations

import argparse
import json
import random
from dataclasses import replace

import numpy as np
import pytest
import torch

from voicespec.frontend.duration import frame_track, load_duration
from voicespec.frontend.text import CharTokenizer
from voicespec.cli.train import add_duration_args
from voicespec.train.configs import DurationTrainConfig
from voicespec.train.duration import (
    char_mean_baseline, check_items, duration_errors, read_items, run_duration, train_duration,
)

TOK = CharTokenizer()


def test_check_items_and_metrics():
    assert check_items([(np.array([1, 2]), [1, 0])], 37) == [([1, 2], [1, 0])]
    for bad, match in [
        (([1, 2], [1]), "as many"), (([], []), "as many"), (([0, 2], [1, 1]), "in 1..36"),
        (([1, 2], [1, -1]), "non-negative"), (([1, 2], [0, 0]), "sum to 0"), (5, "expected"),
    ]:
        with pytest.raises(ValueError, match=match):
            check_items([bad], 37)
    m = duration_errors([([2, 2], [1, 3]), ([5], [4])])
    assert m["mae_frames_per_char"] == pytest.approx(3 / 3)
    assert m["length_rel_error_median"] == pytest.approx(0.125)  # median of 0 and 0.25
    assert m["length_rel_bias_mean"] == pytest.approx(0.125)
    assert char_mean_baseline([([1, 2, 1], [2, 5, 4])]) == {1: 3.0, 2: 5.0}


def _synthetic_items(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    """Durations that depend on the character: vowels long, consonants short, spaces 1, and
    punctuation a long pause."""
    rng = random.Random(seed)
    words = ["cat", "sat", "on", "the", "mat", "go", "see", "tree", "aha", "bob"]
    items = []
    for _ in range(n):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(2, 5))) + rng.choice([".", ",", ""])
        durs = [6 if c in "aeiou" else 1 if c == " " else 10 if c in ".," else 3 for c in text]
        items.append((TOK.encode(text), durs))
    return items


@pytest.mark.slow
def test_training_end_to_end(tmp_path, tiny_duration_config):
    torch.manual_seed(0)
    train, heldout = _synthetic_items(64, 0), _synthetic_items(8, 1)
    cfg = DurationTrainConfig(batch_size=8, lr=1e-2, warmup_steps=5, minutes=5.0, max_steps=60, eval_every_steps=30,
                              log_every_steps=5, checkpoint_every_s=1e9)
    logs: list[str] = []
    folder = train_duration(train, heldout, tmp_path, replace(cfg, max_steps=30), tiny_duration_config, log=logs.append)
    assert (tmp_path / "checkpoint.pt").is_file() and not (tmp_path / "checkpoint.tmp").exists()
    folder = train_duration(train, heldout, tmp_path, cfg, tiny_duration_config, log=logs.append, source="synthetic")
    assert any(line.startswith("resumed at step 30") for line in logs)
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in records if "loss" in r]
    assert [r["step"] for r in records if "loss" in r] == list(range(5, 61, 5))
    assert sum(losses[-3:]) / 3 < 0.5 * sum(losses[:2]) / 2  # the loss falls

    model = load_duration(folder)
    extra = model.config.extra
    assert extra["training"]["steps"] == 60 and extra["training"]["data"] == "synthetic"
    metrics = extra["heldout_metrics"]
    assert metrics["utterances"] == 8 and set(metrics["char_mean_baseline"]) >= {"mae_frames_per_char"}
    assert metrics["mae_frames_per_char"] < 2.0 and metrics["length_rel_error_median"] < 0.3
    ids = TOK.encode("the cat sat.")
    durs = model.predict(ids)
    assert len(durs) == len(ids)
    vowel = durs[ids.index(TOK.encode("a")[0])]
    space = durs[ids.index(TOK.encode(" ")[0])]
    assert vowel > space  # it learned something about characters
    track = frame_track(ids, durs, 16)
    assert track.shape == (sum(durs), 4)


def test_training_rejects_bad_items(tmp_path, tiny_duration_config):
    with pytest.raises(ValueError, match=r"items\[1\]"):
        train_duration([([1], [1]), ([1, 2], [1])], [], tmp_path, DurationTrainConfig(max_steps=1),
                       tiny_duration_config)
    with pytest.raises(ValueError, match="no training items"):
        train_duration([], [], tmp_path, DurationTrainConfig(max_steps=1), tiny_duration_config)


def test_read_items_and_cli(tmp_path, capsys, monkeypatch):
    path = tmp_path / "items.jsonl"
    rows = [{"ids": ids, "durations": d, "split": "heldout" if k % 4 == 0 else "train"}
            for k, (ids, d) in enumerate(_synthetic_items(12, 2))]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    train, heldout = read_items(path)
    assert len(train) == 9 and len(heldout) == 3
    p = argparse.ArgumentParser()
    add_duration_args(p)
    args = p.parse_args(["--items", str(path), "--out", str(tmp_path / "run"), "--max-steps", "3", "--threads", "1"])
    assert args.minutes == DurationTrainConfig.minutes  # the step budget, not the clock, stops this run
    assert run_duration(args) == 0
    assert "exported" in capsys.readouterr().out
    assert load_duration(tmp_path / "run" / "duration").config.extra["training"]["steps"] == 3
    path.write_text('{"ids": [1], "durations": [1], "split": "dev"}\n')
    with pytest.raises(ValueError, match="split"):
        read_items(path)
    path.write_text('{"ids": [1]}\n')
    with pytest.raises(ValueError, match=":1:"):
        read_items(path)

