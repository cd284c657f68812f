"""Decode configuration: bad values fail early with an error that names the problem."""

from __future__ import annotations

import pytest

from voicespec.engine.config import DecodeConfig, SamplingConfig


@pytest.mark.parametrize("gamma", [-1, -5, "fast", 2.0, None])
def test_bad_gamma(gamma):
    with pytest.raises(ValueError, match="gamma must be an integer >= 0 or 'auto'"):
        DecodeConfig(gamma=gamma)


def test_good_gammas_are_accepted():
    assert DecodeConfig(gamma=0).gamma == 0
    assert DecodeConfig(gamma="auto").gamma == "auto"


@pytest.mark.parametrize("max_steps", [0, -3])
def test_bad_max_steps(max_steps):
    with pytest.raises(ValueError, match="max_steps must be >= 1"):
        DecodeConfig(max_steps=max_steps)


@pytest.mark.parametrize(
    "kwargs,fragment",
    [
        ({"temperature": -0.5}, "temperature must be >= 0"),
        ({"temperature": float("nan")}, "temperature must be >= 0"),
        ({"top_k": -1}, "top_k must be >= 0"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_p": float("nan")}, r"top_p must be in \(0, 1\]"),
        ({"repetition_penalty": 0.5}, "repetition_penalty must be >= 1"),
        ({"repetition_window": -2}, "repetition_window must be >= 0"),
    ],
)
def test_bad_sampling_config(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        SamplingConfig(**kwargs)

