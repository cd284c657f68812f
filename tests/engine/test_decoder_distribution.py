"""Sampling: speculative output has exactly the target's distribution (chi-square tests).

Each test draws many seeded samples, compares their empirical distribution with the target's
exact distribution (enumerated), and requires p > 0.001. A deliberately broken acceptance rule
(accept every draft) must fail the same test with p < 1e-6, which shows the test can fail.
Seeds are fixed, so every outcome here is deterministic.
"""

from __future__ import annotations

from collections import Counter

import pytest
import torch

import voicespec.engine.decoder as decoder_module
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.engine.layout import Prompt
from voicespec.engine.policy import TokenPolicy
from voicespec.pipeline.tiny import tiny_codec_lm, tiny_flat

SAMPLING = SamplingConfig(temperature=1.3, top_k=3, coupling="residual")  # the residual rule (Leviathan et al.)
N_SAMPLES = 800
N_BROKEN = 300  # a wrong rule is far off: fewer samples show it


def empirical(target, drafter, prompt, n_steps: int, gamma: int, n: int) -> Counter:
    counts: Counter = Counter()
    decoder = SpecDecoder(target, drafter, DecodeConfig(SAMPLING, gamma=gamma, max_steps=n_steps))
    for seed in range(n):
        gen = decoder.generate(prompt, DecodeConfig(SAMPLING, gamma=gamma, max_steps=n_steps, seed=seed))
        gen.run()
        counts[tuple(tuple(s) for s in gen.generated.tolist())] += 1
    return counts


def flat_case(sharpened):
    target = sharpened(tiny_flat(seed=11, n_codebooks=2, codebook_size=4, min_frames=2))
    draft = sharpened(tiny_flat(seed=12, n_layers=1, n_codebooks=2, codebook_size=4, min_frames=2))
    a = target.layout.audio_offset
    # Every audio id appears in the prompt, so the n-gram drafter always finds a match to propose.
    prompt = target.layout.prompt([5, 6, a, a + 4, a + 1, a + 5, a + 2, a + 6, a + 3, a + 7, a, a + 4])
    return target, draft, prompt, 3


def delay_case(sharpened):
    target = sharpened(tiny_codec_lm(seed=13, n_codebooks=2, codebook_size=4, min_frames=3))
    draft = sharpened(tiny_codec_lm(seed=14, n_layers=1, n_codebooks=2, codebook_size=4, min_frames=3))
    layout = target.layout
    pad, bos = layout.pad_id, layout.bos_id
    # An audio prompt (continuation) that holds every first-step token after a BOS step, so the
    # n-gram drafter has something to propose from the very first step.
    audio = [[bos, bos], [0, pad], [1, 2], [1, pad], [3, 0], [2, pad], [0, 1], [3, pad], [2, 2], [bos, bos]]
    prompt = Prompt(torch.tensor([1, 2, 3]), torch.tensor(audio))
    return target, draft, prompt, 2


CASES = {"flat": flat_case, "delay": delay_case}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("drafter_name", ["draft-model", "ngram"])
def test_speculative_sampling_matches_target_distribution(case, drafter_name, monkeypatch, sharpened,
                                                          exact_distribution, chi_square_pvalue, accept_everything):
    target, draft, prompt, n_steps = CASES[case](sharpened)
    drafter = ModelDrafter(draft) if drafter_name == "draft-model" else NGramDrafter(max_n=2)
    exact = exact_distribution(target, prompt, TokenPolicy(target.layout, SAMPLING), n_steps)
    assert abs(sum(exact.values()) - 1) < 1e-5
    counts = empirical(target, drafter, prompt, n_steps, gamma=2, n=N_SAMPLES)
    assert set(counts) <= set(exact), "produced a sequence the target gives probability zero"
    assert chi_square_pvalue(counts, exact) > 1e-3

    monkeypatch.setattr(decoder_module, "verify_sampling", accept_everything)
    broken = empirical(target, drafter, prompt, n_steps, gamma=2, n=N_BROKEN)
    assert chi_square_pvalue(broken, exact) < 1e-6




@pytest.mark.parametrize("case", list(CASES))
def test_invariant_sampling_commits_plain_decodings_steps(case, sharpened):
    """Flat and delay layouts (a step of several codebooks): with the invariant coupling the
    draft model and the n-gram drafter commit exactly plain decoding's steps for each seed."""
    target, draft, prompt, _ = CASES[case](sharpened)
    sampling = SamplingConfig(temperature=1.3, top_k=3)
    for seed in range(5):
        plain = SpecDecoder(target, None, DecodeConfig(sampling, gamma=0, max_steps=8, seed=seed)).generate(prompt)
        plain.run()
        for drafter in (ModelDrafter(draft), NGramDrafter(max_n=2)):
            for gamma in (1, 3):
                gen = SpecDecoder(target, drafter, DecodeConfig(sampling, gamma=gamma, max_steps=8, seed=seed)).generate(prompt)
                gen.run()
                assert torch.equal(gen.generated, plain.generated), f"{drafter} γ={gamma} seed={seed}"
