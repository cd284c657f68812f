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
        ({"temperature": -0.5}, r"temperature must be 0 \(greedy\) or in"),
        ({"temperature": float("nan")}, "temperature must be 0"),
        ({"temperature": 1e300}, "temperature must be 0"),  # issue 17, defect 7: NaN probabilities later
        ({"temperature": 1e-300}, "temperature must be 0"),
        ({"top_k": -1}, r"top_k must be in \[0,"),
        ({"top_k": 10**30}, r"top_k must be in \[0,"),
        ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
        ({"top_p": 1.5}, r"top_p must be in \(0, 1\]"),
        ({"top_p": float("nan")}, r"top_p must be in \(0, 1\]"),
        ({"repetition_penalty": 0.5}, r"repetition_penalty must be in \[1,"),
        ({"repetition_penalty": float("inf")}, r"repetition_penalty must be in \[1,"),
        ({"repetition_window": -2}, r"repetition_window must be in \[0,"),
        ({"repetition_window": 10**9}, r"repetition_window must be in \[0,"),
    ],
)
def test_bad_sampling_config(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        SamplingConfig(**kwargs)



@pytest.mark.parametrize("seed", [-1, 10**30, 2**53, 1.5, True])
def test_seeds_outside_the_exact_json_range_are_refused(seed):
    """Issue 17, defect 7: seed 10**30 overflowed int64 in every later context."""
    with pytest.raises(ValueError, match=r"seed must be an integer in \[0, 2\*\*53 - 1\]"):
        DecodeConfig(seed=seed)


def test_the_largest_seed_decodes():
    from voicespec.engine.decoder import SpecDecoder
    from voicespec.pipeline.tiny import tiny_codec_lm

    target = tiny_codec_lm(seed=1, n_codebooks=2, codebook_size=8, min_frames=3, coarse_first=True)
    config = DecodeConfig(SamplingConfig(temperature=1.0), gamma=0, max_steps=5, seed=2**53 - 1)
    assert SpecDecoder(target, None, config).generate(target.layout.prompt([1, 2])).run().shape[1] > 0
