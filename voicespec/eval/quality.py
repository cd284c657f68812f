"""Quality metrics with their conventions written down: mel-cepstral distortion (MCD) with DTW,
and intelligibility as CER/WER of our CTC recognizer.

MCD numbers from different papers are not comparable (cepstrum type, log base, c0, frame rate,
alignment, silence handling all differ); ours are comparable with each other, across models and
sample rates, because every choice is fixed here and stated in :func:`mcd_dtw`.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Iterable

import numpy as np
import torch
import torchaudio.functional as AF

ANALYSIS_RATE = 16000
N_FFT = 400  # 25 ms window at 16 kHz
HOP = 80  # 5 ms
N_MELS = 40
F_MAX = 7500.0  # inside the resampler's flat passband (below), so other input rates measure alike
# "kaiser_best" (as in resampy/librosa): flat to ~0.95 x 8 kHz. torchaudio's default (6 zero
# crossings) already dips several dB above ~6 kHz, which alone costs ~1.6 dB MCD on a 24 kHz input.
_RESAMPLE = {"lowpass_filter_width": 64, "rolloff": 0.9475937167399596, "resampling_method": "sinc_interp_kaiser",
             "beta": 14.769656459379492}
N_CEPS = 13  # c1..c13; c0 (overall level) is left out
MCD_SCALE = 10.0 / math.log(10.0) * math.sqrt(2.0)
DYNAMIC_RANGE_DB = 60.0  # mel powers floored this far below the signal's loudest band


def _as_mono(pcm: np.ndarray | torch.Tensor, name: str) -> torch.Tensor:
    x = torch.as_tensor(pcm.detach().cpu() if isinstance(pcm, torch.Tensor) else np.asarray(pcm)).double()
    if x.ndim != 1:
        raise ValueError(f"{name}: expected mono PCM [samples], got shape {tuple(x.shape)}")
    if x.numel() == 0:
        raise ValueError(f"{name}: empty signal")
    if not torch.isfinite(x).all():
        raise ValueError(f"{name}: signal has NaN or infinite samples")
    return x


def mel_cepstra(pcm: np.ndarray | torch.Tensor, sample_rate: int) -> np.ndarray:
    """``[frames, 13]`` mel cepstra c1..c13 of mono PCM, as used by :func:`mcd_dtw`."""
    try:
        rate = -1 if isinstance(sample_rate, bool) else operator.index(sample_rate)
    except TypeError:
        rate = -1
    if rate <= 0:
        raise ValueError(f"sample_rate must be a positive integer, got {sample_rate!r}")
    x = _as_mono(pcm, "pcm")
    if rate != ANALYSIS_RATE:
        x = AF.resample(x.float(), rate, ANALYSIS_RATE, **_RESAMPLE).double()  # float64 conv is slow
    frames = max(1, -(-x.numel() // HOP))
    x = torch.nn.functional.pad(x, (N_FFT // 2, N_FFT // 2 + frames * HOP - x.numel()))
    window = torch.hann_window(N_FFT, periodic=True, dtype=torch.float64)
    spec = torch.stft(x, N_FFT, HOP, window=window, center=False, return_complex=True)[:, :frames]
    fbank = AF.melscale_fbanks(N_FFT // 2 + 1, 0.0, F_MAX, N_MELS, ANALYSIS_RATE,
                               mel_scale="htk").double()  # [freqs, mels]
    mel_power = fbank.T @ spec.abs().pow(2)  # [mels, frames]
    floor = max(float(mel_power.max()) * 10 ** (-DYNAMIC_RANGE_DB / 10), 1e-30)
    log_amp = 0.5 * torch.log(mel_power.clamp_min(floor))
    dct = AF.create_dct(N_CEPS + 1, N_MELS, norm="ortho").double()  # [mels, 1 + 13]
    return (log_amp.T @ dct)[:, 1:].numpy()


def dtw(cost: np.ndarray) -> tuple[float, list[tuple[int, int]]]:
    """Cheapest monotone path through ``cost [N, M]`` from ``(0, 0)`` to ``(N-1, M-1)`` with steps
    (1, 0), (0, 1), (1, 1), every visited cell's cost counted once (no step weights): the total
    and the path. O(N·M) time and memory.

    Each row is one vectorised pass: with ``m[j] = min(D[i-1, j], D[i-1, j-1])`` and ``C`` the
    running sum of row ``i``'s costs, ``D[i, j] = c[i, j] + min(m[j], D[i, j-1])`` unrolls to
    ``C[j] + min_{k <= j} (m[k] - C[k-1])``, a cumulative minimum."""
    c = np.asarray(cost, dtype=np.float64)
    if c.ndim != 2 or 0 in c.shape:
        raise ValueError(f"cost must be a non-empty 2-D matrix, got shape {c.shape}")
    if not np.isfinite(c).all():
        raise ValueError("cost has NaN or infinite entries")
    n, m = c.shape
    acc = np.empty_like(c)
    acc[0] = np.cumsum(c[0])
    for i in range(1, n):
        prev = acc[i - 1]
        best_in = np.minimum(prev, np.concatenate(([np.inf], prev[:-1])))  # from above or diagonal
        run = np.cumsum(c[i])
        acc[i] = run + np.minimum.accumulate(best_in - (run - c[i]))
    path = [(n - 1, m - 1)]
    i, j = n - 1, m - 1
    while i or j:  # back along the cheapest predecessor; ties prefer the diagonal
        if i == 0:
            j -= 1
        elif j == 0:
            i -= 1
        else:
            diag, up, left = acc[i - 1, j - 1], acc[i - 1, j], acc[i, j - 1]
            if diag <= up and diag <= left:
                i, j = i - 1, j - 1
            elif up <= left:
                i -= 1
            else:
                j -= 1
        path.append((i, j))
    return float(acc[-1, -1]), path[::-1]


def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Euclidean distances ``[len(a), len(b)]`` from differences, not the ``|a|² + |b|² - 2ab``
    shortcut, so identical frames are exactly 0 apart."""
    return torch.cdist(torch.from_numpy(a), torch.from_numpy(b), compute_mode="donot_use_mm_for_euclid_dist").numpy()


def mcd_dtw(ref: np.ndarray | torch.Tensor, hyp: np.ndarray | torch.Tensor, sample_rate: int,
            hyp_sample_rate: int | None = None) -> float:
    """Mel-cepstral distortion (dB) between two mono signals, time-aligned by DTW.

    Convention (ours; papers differ): both signals are resampled to 16 kHz (``hyp`` is at
    ``hyp_sample_rate``, default ``sample_rate``) with a Kaiser-windowed sinc flat to ~7.6 kHz.
    Frames: 25 ms periodic Hann window (400 samples), 5 ms hop, zero padding of half a window at
    each end (``ceil(N / 80)`` frames). Per frame: power spectrum → 40 HTK mel bands over
    0-7.5 kHz (triangles of peak 1, not area-normalized) → floor at 60 dB below the signal's own
    loudest band (so digital silence, 16-bit silence and a faint noise floor all read as
    silence, and a gain change costs nothing but rounding) → natural log of the mel *amplitude*
    (``0.5 * ln(power)``) → orthonormal DCT-II; c1..c13 are kept (c0, the level, is dropped).
    DTW (:func:`dtw`) minimises the summed Euclidean distance between cepstral vectors over steps
    (1,0), (0,1), (1,1); then

        ``MCD = (10 / ln 10) * sqrt(2) * mean over the path's pairs of ||c_ref - c_hyp||_2``.

    No silence trimming, no voiced-frame selection: pauses count like speech (silence against
    silence is 0). A signal against itself gives exactly 0. Not comparable with SPTK/WORLD
    mel-cepstrum MCDs in papers; compare our numbers with our numbers.
    """
    hyp_rate = sample_rate if hyp_sample_rate is None else hyp_sample_rate
    a = mel_cepstra(ref, sample_rate)
    b = mel_cepstra(hyp, hyp_rate)
    total, path = dtw(_distances(a, b))
    return MCD_SCALE * total / len(path)


def cer_report(asr: Any, items: Iterable[tuple[str, np.ndarray | torch.Tensor, int]]) -> dict[str, Any]:
    """Intelligibility of audio: greedy CTC transcripts of each ``(reference text, pcm,
    sample_rate)`` by ``asr`` (a :class:`~voicespec.eval.recognizer.CtcAsr`), pooled CER/WER
    (:func:`~voicespec.eval.judge.corpus_error_rates`) and per-item hypotheses.

    References are reduced to the recognizer's alphabet exactly as its training data was (the
    held-out CER in its config is measured the same way), so pass normalized text
    (:func:`voicespec.frontend.text.normalize`); ``ref_chars_dropped`` counts what that reduction removed."""
    from voicespec.eval.judge import cer, corpus_error_rates, wer
    from voicespec.eval.recognizer import transcribe

    rows, pairs, dropped = [], [], 0
    for text, pcm, sample_rate in items:
        ref = asr.tokenizer.decode(asr.tokenizer.encode(text))
        dropped += len(text) - len(ref)
        hyp = transcribe(asr, pcm, sample_rate)
        pairs.append((ref, hyp))
        rows.append({"ref": ref, "hyp": hyp, "cer": cer(ref, hyp), "wer": wer(ref, hyp)})
    return {**corpus_error_rates(pairs), "ref_chars_dropped": dropped, "items": rows}
