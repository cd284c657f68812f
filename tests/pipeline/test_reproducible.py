"""A seed means the same audio everywhere, on the default voice sampling (its own T 0.7 / top-k 50:
it decodes greedily unless a request asks for a temperature, and greedy audio has no seed to keep):
with speculation on or off, whatever γ (the adaptive one follows timings), tree or drafter; and
`say`'s file at the default settings whatever number of threads torch runs with (the
drafter-invariant coupling plus fixed codec blocks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from voicespec.api import Voice

TEXT = "The quick brown fox jumps over the lazy dog near the river bank."


@pytest.fixture(scope="module")
def voice():
    return Voice.from_pretrained()


@pytest.mark.slow
def test_speculation_gamma_tree_and_drafter_do_not_change_a_seeds_audio(voice):
    sampled = {"temperature": voice.sampled.temperature}  # the voice's own sampling (its top-k comes with it)
    plain = voice.say(TEXT, seed=3, gamma=0, **sampled).pcm
    assert plain.size > 16000
    for options in ({}, {"gamma": 4}, {"tree": "2,2,1"}, {"drafter": "ngram", "gamma": 3}, {"drafter": "none"}):
        audio = voice.say(TEXT, seed=3, **sampled, **options)
        assert np.array_equal(audio.pcm, plain), options
    assert not np.array_equal(voice.say(TEXT, seed=4, **sampled).pcm, plain)  # the seed does decide
    residual = [voice.say(TEXT, seed=3, gamma=g, coupling="residual", **sampled).pcm for g in (0, 4)]
    assert not np.array_equal(*residual)  # the control: under the residual rule the draws follow the drafts


@pytest.mark.slow
def test_say_writes_the_same_file_whatever_the_threads(tmp_path):
    bin_dir = Path(sys.executable).parent
    files = []
    for omp, extra in (("1", []), ("2", ["--threads", "0"]), ("2", ["--threads", "2"])):
        out = tmp_path / f"say-{omp}-{len(extra)}-{extra[-1] if extra else ''}.wav"
        env = {**os.environ, "OMP_NUM_THREADS": omp}
        subprocess.run([str(bin_dir / "voicespec"), "say", TEXT, "--seed", "3", "-o", str(out), *extra], env=env,
                       check=True, capture_output=True, timeout=300)
        files.append(out.read_bytes())
    assert files[0] == files[1] == files[2]
