"""The sentence bootstrap behind every ``ci95`` of ``voicespec evaluate``."""

from __future__ import annotations

import numpy as np
import pytest

from voicespec.eval.bootstrap import ratio_interval


def test_the_pooled_ratio_is_total_over_total_and_one_group_has_no_spread():
    value, low, high = ratio_interval([1, 3], [4, 4], [0, 0])
    assert value == 0.5 and low == high == 0.5  # one sentence (two seeds): every draw is that sentence


def test_seeds_of_a_sentence_are_drawn_together():
    # sentence 0 has errors on both seeds, sentence 1 on none: a draw holds 0, 1 or 2 copies of
    # sentence 0, so the only possible ratios are 0, 1/2 and 1, never a seed of one sentence alone
    nums, dens, groups = [2, 2, 0, 0], [2, 2, 2, 2], [0, 0, 1, 1]
    value, low, high = ratio_interval(nums, dens, groups, draws=500)
    assert value == 0.5 and low == 0.0 and high == 1.0


def test_the_interval_covers_the_truth_at_about_its_level():
    rng = np.random.default_rng(1)
    covered = 0
    for trial in range(200):
        errors = rng.binomial(10, 0.2, size=25)  # 25 sentences of 10 words, true WER 0.2
        _, low, high = ratio_interval(errors, [10] * 25, range(25), draws=400, seed=trial)
        covered += low <= 0.2 <= high
    assert 0.88 <= covered / 200 <= 0.99


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="one length"):
        ratio_interval([1], [1, 2], [0])
    with pytest.raises(ValueError, match="non-empty"):
        ratio_interval([], [], [])
