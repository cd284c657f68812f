"""The ideal speedup model: expected tokens per step, α from a trace, Leviathan's formula."""

from __future__ import annotations

import pytest

from voicespec.bench.ideal import alpha_from_trace, efficiency, expected_tokens, ideal_speedup


def test_expected_tokens_closed_form():
    assert expected_tokens(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2) == pytest.approx(3.3616)
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens(1.0, 4) == 5.0  # the limit: every draft accepted, plus the bonus step
    assert expected_tokens(0.0, 4) == expected_tokens(None, 4) == expected_tokens(0.9, 0) == 1.0


def test_alpha_is_accepted_over_tried_positions():
    # 5 accepted steps; the (4, 1) and (2, 0) drafts were each cut by one rejection; the full
    # (4, 4) draft and the empty one had none.
    assert alpha_from_trace([(4, 4), (4, 1), (0, 0), (2, 0)]) == pytest.approx(5 / 7)
    assert alpha_from_trace([(3, 3), (3, 3)]) == 1.0
    assert alpha_from_trace([(0, 0), (0, 0)]) is None


def test_ideal_speedup_fixed_gamma_is_leviathans_formula():
    # α = 0.8, γ = 4, c_draft = 0.1, c_verify(4) = 1.2, c_plain = 1: E = 3.3616 over a cost of
    # 4·0.1 + 1.2 = 1.6 → 2.101. Ten passes measured: 4 s drafting, 12 s verifying.
    assert ideal_speedup(0.8, [4] * 10, draft_s=4.0, verify_s=12.0, plain_pass_s=1.0) == pytest.approx(3.3616 / 1.6)
    # Leviathan's own example shape: c = c_draft / c_plain = 0.05, verify as cheap as a plain step.
    assert ideal_speedup(0.9, [3], draft_s=3 * 0.05, verify_s=1.0, plain_pass_s=1.0) == pytest.approx(3.439 / 1.15)


def test_ideal_speedup_with_varying_gamma_and_plain():
    # One empty draft (E = 1) and one of 2 at α = 0.5 (E = 1.75); 0.5 s drafting + 2 s verifying.
    assert ideal_speedup(0.5, [0, 2], draft_s=0.5, verify_s=2.0, plain_pass_s=1.0) == pytest.approx(2.75 / 2.5)
    # Plain decoding measured against its own pass cost is exactly 1.
    assert ideal_speedup(None, [0] * 5, draft_s=0.0, verify_s=0.5, plain_pass_s=0.1) == pytest.approx(1.0)
    assert efficiency(1.5, 2.0) == 0.75
    with pytest.raises(ValueError):
        ideal_speedup(0.5, [], 0.0, 0.0, 1.0)

