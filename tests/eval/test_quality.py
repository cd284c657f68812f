"""Quality metrics: DTW against brute force, MCD's behaviour on synthetic vowels (self, stretched,
different, other sample rates, gain, silence) and the CER report's plumbing."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
import torch

from voicespec.eval.quality import cer_report, dtw, mcd_dtw, mel_cepstra
from voicespec.eval.judge import cer, corpus_error_rates, wer
from voicespec.eval.recognizer import AsrConfig, CtcAsr, transcribe

FORMANTS = {"a": (730, 1090, 2440), "i": (270, 2290, 3010), "u": (300, 870, 2240), "e": (530, 1840, 2480),
            "o": (570, 840, 2410)}


def vowels(seq: list[tuple[str, float]], sr: int, stretch: float = 1.0, f0: float = 120.0) -> np.ndarray:
    """Harmonic "vowels" (formant-shaped harmonics below 8 kHz) between 0.1 s of silence; the
    same analytic signal at any rate, and ``stretch`` lengthens every vowel without changing it."""
    out = [np.zeros(int(0.1 * sr))]
    for k, (v, dur) in enumerate(seq):
        t = np.arange(int(round(dur * stretch * sr))) / sr
        x = np.zeros_like(t)
        for h in range(1, int(7900 // f0) + 1):
            amp = sum(np.exp(-0.5 * ((h * f0 - f) / 80) ** 2) for f in FORMANTS[v]) + 0.01
            x += amp * np.sin(2 * np.pi * h * f0 * t + h * k)
        out.append(0.1 * x / np.abs(x).max())
    out.append(np.zeros(int(0.1 * sr)))
    return np.concatenate(out)


WORD = [("a", 0.25), ("i", 0.2), ("u", 0.3), ("e", 0.2), ("o", 0.25)]
OTHER = [("i", 0.25), ("o", 0.2), ("e", 0.3), ("a", 0.2), ("u", 0.25)]
SR = 16000


# --- DTW -----------------------------------------------------------------------------------------

def _all_paths(n: int, m: int):
    def walk(i, j, path):
        if (i, j) == (n - 1, m - 1):
            yield path
            return
        for di, dj in ((1, 0), (0, 1), (1, 1)):
            if i + di < n and j + dj < m:
                yield from walk(i + di, j + dj, path + [(i + di, j + dj)])
    yield from walk(0, 0, [(0, 0)])


@pytest.mark.parametrize("shape", [(1, 1), (1, 4), (4, 1), (2, 3), (3, 3), (4, 5), (5, 4)])
def test_dtw_matches_brute_force(shape):
    rng = np.random.default_rng(sum(shape))
    for _ in range(10):
        cost = rng.random(shape)
        best = min(sum(cost[p] for p in path) for path in _all_paths(*shape))
        total, path = dtw(cost)
        assert total == pytest.approx(best, abs=1e-12)
        assert path[0] == (0, 0) and path[-1] == (shape[0] - 1, shape[1] - 1)
        assert all((b[0] - a[0], b[1] - a[1]) in {(1, 0), (0, 1), (1, 1)} for a, b in zip(path, path[1:]))
        assert sum(cost[p] for p in path) == pytest.approx(total, abs=1e-12)


def test_dtw_matches_textbook_dp_on_larger_matrices():
    rng = np.random.default_rng(7)
    for shape in [(30, 45), (60, 20), (1, 50)]:
        cost = rng.random(shape) * 5
        acc = np.full((shape[0] + 1, shape[1] + 1), np.inf)
        acc[0, 0] = 0.0
        for i, j in itertools.product(range(shape[0]), range(shape[1])):
            acc[i + 1, j + 1] = cost[i, j] + min(acc[i, j], acc[i, j + 1], acc[i + 1, j])
        assert dtw(cost)[0] == pytest.approx(acc[-1, -1], rel=1e-12)


def test_dtw_bad_inputs():
    for bad in (np.zeros((0, 3)), np.zeros(3), np.array([[1.0, np.nan]])):
        with pytest.raises(ValueError):
            dtw(bad)


# --- MCD -----------------------------------------------------------------------------------------

def test_mcd_self_is_zero_and_gain_is_free():
    x = vowels(WORD, SR)
    assert mcd_dtw(x, x, SR) == 0.0
    assert mcd_dtw(torch.from_numpy(x).float(), x.astype(np.float32), SR) == 0.0  # tensors and arrays alike
    assert mcd_dtw(x, 3.0 * x, SR) < 1e-3  # c0 is left out and the silence floor scales with the signal
    assert mcd_dtw(x, np.round(x * 32767) / 32767, SR) < 0.1  # 16-bit quantization


def test_mcd_stretched_copy_small_different_signal_large():
    x = vowels(WORD, SR)
    stretched = mcd_dtw(x, vowels(WORD, SR, stretch=1.3), SR)
    squeezed = mcd_dtw(x, vowels(WORD, SR, stretch=0.8), SR)
    different = mcd_dtw(x, vowels(OTHER, SR), SR)
    pitch = mcd_dtw(x, vowels(WORD, SR, f0=140.0), SR)
    assert 0 < stretched < 1.0 and 0 < squeezed < 1.0  # DTW absorbs the timing
    assert different > 10.0 > pitch  # other vowels are far; same vowels at another pitch are close
    assert mcd_dtw(vowels(OTHER, SR), x, SR) == pytest.approx(different, rel=1e-9)  # symmetric here


def test_mcd_different_sample_rates():
    x = vowels(WORD, SR)
    for rate in (24000, 22050, 44100):
        y = vowels(WORD, rate)
        assert mcd_dtw(x, y, SR, rate) < 0.5
        assert mcd_dtw(y, x, rate, SR) == pytest.approx(mcd_dtw(x, y, SR, rate), abs=1e-9)
        assert mcd_dtw(y, y, rate) == 0.0
    assert mcd_dtw(x, vowels(WORD, 24000), SR) > 10.0  # a 24 kHz signal taken for 16 kHz is far off


def test_mcd_ten_second_clips_are_fast():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(10 * SR) * 0.1, rng.standard_normal(10 * SR) * 0.1
    t0 = time.perf_counter()
    mcd_dtw(a, b, SR)
    assert time.perf_counter() - t0 < 2.0  # about 0.25 s on one loaded core


def test_mel_cepstra_shape_and_bad_inputs():
    assert mel_cepstra(np.zeros(800), SR).shape == (10, 13)  # ceil(N / 80) frames of c1..c13
    assert mel_cepstra(np.zeros(1), SR).shape == (1, 13)
    assert np.abs(mel_cepstra(np.zeros(800), SR)).max() < 1e-3  # silence: a flat floor, no cepstrum
    with pytest.raises(ValueError, match="empty"):
        mcd_dtw(np.zeros(0), np.zeros(100), SR)
    with pytest.raises(ValueError, match="mono"):
        mcd_dtw(np.zeros((2, 100)), np.zeros(100), SR)
    with pytest.raises(ValueError, match="NaN"):
        mcd_dtw(np.full(100, np.nan), np.zeros(100), SR)
    with pytest.raises(ValueError, match="sample_rate"):
        mcd_dtw(np.zeros(100), np.zeros(100), 0)
    with pytest.raises(ValueError, match="sample_rate"):
        mcd_dtw(np.zeros(100), np.zeros(100), 16000, 22050.5)
    assert mcd_dtw(np.ones(100), np.ones(100), np.int64(SR)) == 0.0


# --- CER report ----------------------------------------------------------------------------------

def test_cer_report_reuses_the_recognizer():
    torch.manual_seed(0)
    asr = CtcAsr(AsrConfig(conv_channels=16, conv_layers=1, hidden=16, layers=1, dropout=0.0)).eval()
    rng = np.random.default_rng(0)
    items = [("hello there.", rng.standard_normal(16000) * 0.1, 16000),
             ("Two 2 words", rng.standard_normal(24000) * 0.1, 24000)]
    report = cer_report(asr, items)
    assert report["ref_chars_dropped"] == 2  # "T" and "2" are outside the alphabet
    refs = ["hello there.", "wo  words"]
    hyps = [transcribe(asr, pcm, sr) for _, pcm, sr in items]
    assert [r["ref"] for r in report["items"]] == refs and [r["hyp"] for r in report["items"]] == hyps
    pooled = corpus_error_rates(list(zip(refs, hyps)))
    assert {k: report[k] for k in pooled} == pooled
    assert [(r["cer"], r["wer"]) for r in report["items"]] == [(cer(r, h), wer(r, h)) for r, h in zip(refs, hyps)]
    empty = cer_report(asr, [])
    assert empty["utterances"] == 0 and empty["items"] == [] and empty["cer"] == 0.0
