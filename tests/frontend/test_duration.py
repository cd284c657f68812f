"""Durations at run time: the frame-aligned text track, cumulative rounding, the predictor and its
folder. (Training one: tests/train/test_duration.py.)"""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from voicespec.frontend.duration import DurationConfig, DurationModel, cumulative_round, frame_track, load_duration
from voicespec.frontend.text import CharTokenizer

TOK = CharTokenizer()


# --- frame_track ---------------------------------------------------------------------------------

def test_frame_track_hand_worked():
    track = frame_track([5, 6, 7], [2, 0, 1], max_pos=8)
    assert track.dtype == torch.long and track.shape == (3, 4)
    assert track.tolist() == [[5, 7, 0, 1], [5, 7, 1, 0], [7, 0, 0, 0]]  # 6 has no frames: never seen


def test_frame_track_positions_and_clamping():
    track = frame_track([3, 4], [5, 2], max_pos=3)
    assert track.tolist() == [
        [3, 4, 0, 2], [3, 4, 1, 2], [3, 4, 2, 2], [3, 4, 2, 1], [3, 4, 2, 0],  # since/until clamp at 2
        [4, 0, 0, 1], [4, 0, 1, 0],
    ]
    assert frame_track([3, 4], [5, 2], max_pos=1)[:, 2:].abs().sum() == 0  # max_pos 1: positions all 0


def test_frame_track_zero_durations_at_the_ends_and_empty():
    assert frame_track([1, 2, 3, 4], [0, 1, 1, 0], 4).tolist() == [[2, 3, 0, 0], [3, 0, 0, 0]]
    assert frame_track([], [], 4).shape == (0, 4)
    assert frame_track([1, 2], [0, 0], 4).shape == (0, 4)


def test_frame_track_accepts_numpy_and_torch_integers():
    ref = frame_track([5, 6], [2, 1], 4)
    assert torch.equal(frame_track(np.array([5, 6]), np.array([2, 1]), 4), ref)
    assert torch.equal(frame_track(torch.tensor([5, 6]), torch.tensor([2, 1]), 4), ref)


def test_frame_track_matches_a_per_frame_loop():
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 12)
        ids = [rng.randint(1, 36) for _ in range(n)]
        durs = [rng.choice([0, 1, 2, 3, 7]) for _ in range(n)]
        kept = [(u, d) for u, d in zip(ids, durs) if d]
        rows = []
        for k, (u, d) in enumerate(kept):
            nxt = kept[k + 1][0] if k + 1 < len(kept) else 0
            rows += [[u, nxt, min(f, 4), min(d - 1 - f, 4)] for f in range(d)]
        assert frame_track(ids, durs, 5).tolist() == rows


@pytest.mark.parametrize("ids, durs, max_pos, match", [
    ([1, 2], [1], 4, "differ in length"),
    ([1, 2], [1, -1], 4, "non-negative"),
    ([1, -2], [1, 1], 4, "non-negative"),
    ([1, 2], [1.5, 1], 4, "non-negative integers"),
    ([1, 2], [True, 1], 4, "non-negative integers"),
    ([1, 2], [1, 1], 0, "max_pos"),
    ([1, 2], [1, 1], 2.0, "max_pos"),
])
def test_frame_track_bad_inputs(ids, durs, max_pos, match):
    with pytest.raises(ValueError, match=match):
        frame_track(ids, durs, max_pos)


# --- rounding ------------------------------------------------------------------------------------

def test_cumulative_round_keeps_the_total_exact():
    assert cumulative_round([0.4] * 10) == [0, 1, 0, 1, 0, 0, 1, 0, 1, 0]  # naive rounding: all 0
    assert sum(cumulative_round([0.4] * 10)) == 4
    assert cumulative_round([2.5, 2.5]) == [3, 2]  # half up on the running sum
    assert cumulative_round([]) == []
    rng = random.Random(1)
    for _ in range(200):
        values = [rng.uniform(0, 9) for _ in range(rng.randint(1, 60))]
        out = cumulative_round(values)
        assert sum(out) == round(sum(values)) or abs(sum(out) - sum(values)) == pytest.approx(0.5)
        running = 0.0
        for k, v in enumerate(values):  # every prefix within half a frame: no drift
            running += v
            assert abs(sum(out[: k + 1]) - running) <= 0.5 + 1e-9
        assert min(out) >= 0


@pytest.mark.parametrize("bad", [[-0.1], [float("nan")], [float("inf")]])
def test_cumulative_round_rejects_bad_values(bad):
    with pytest.raises(ValueError):
        cumulative_round(bad)


# --- model ---------------------------------------------------------------------------------------

def test_forward_shapes_and_padding_do_not_change_predictions(tiny_duration_config):
    torch.manual_seed(0)
    model = DurationModel(tiny_duration_config).eval()
    a, b = TOK.encode("hello there"), TOK.encode("hi")
    ids = torch.zeros(2, len(a), dtype=torch.long)
    ids[0], ids[1, : len(b)] = torch.tensor(a), torch.tensor(b)
    with torch.no_grad():
        out = model(ids, torch.tensor([len(a), len(b)]))
        alone = model(torch.tensor([b]))
    assert out.shape == (2, len(a))
    assert torch.allclose(out[1, : len(b)], alone[0], atol=1e-5)
    assert out[1, len(b):].abs().sum() == 0


def test_predict_total_rate_and_bad_inputs(tiny_duration_config):
    torch.manual_seed(0)
    model = DurationModel(tiny_duration_config)
    ids = TOK.encode("the quick brown fox")
    frames = model.frames(ids)
    durs = model.predict(ids)
    assert len(durs) == len(ids) and min(durs) >= 0
    assert sum(durs) == max(1, int(np.floor(sum(frames) + 0.5)))
    fast = model.predict(ids, rate=2.0)
    assert sum(fast) == max(1, int(np.floor(sum(frames) / 2 + 0.5)))
    assert sum(model.predict(ids[:1], rate=1e6)) == 1  # never zero frames for non-empty text
    assert model.predict([]) == []
    for bad in (0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="rate"):
            model.predict(ids, rate=bad)
    for bad_ids in ([0, 1], [1, tiny_duration_config.vocab_size], [1.0]):
        with pytest.raises(ValueError, match="character ids"):
            model.predict(bad_ids)


def test_config_validation():
    with pytest.raises(ValueError, match="odd"):
        DurationConfig(conv_kernel=4)
    with pytest.raises(ValueError, match="alphabet"):
        DurationConfig(alphabet="aa")
    with pytest.raises(ValueError, match="frame_rate"):
        DurationConfig(frame_rate=0)


def test_folder_round_trip_and_wrong_folder(tmp_path, tiny_duration_config):
    torch.manual_seed(0)
    model = DurationModel(tiny_duration_config)
    model.save(tmp_path / "d")
    back = load_duration(tmp_path / "d")
    ids = TOK.encode("round trip")
    assert back.config == tiny_duration_config and back.frames(ids) == model.frames(ids)
    cfg = json.loads((tmp_path / "d" / "config.json").read_text())
    cfg["model_type"] = "voicespec_ctc_asr"
    (tmp_path / "d" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="not a voicespec duration config"):
        load_duration(tmp_path / "d")
    with pytest.raises(FileNotFoundError):
        load_duration(tmp_path / "missing")
