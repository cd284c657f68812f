"""CTC forced alignment of characters to 50 Hz frames: per-character durations for a
frame-aligned TTS LM (``voicespec train lm``), from the recognizer of :mod:`voicespec.eval.recognizer`.

Alignment uses ``torchaudio.functional.forced_align`` (deprecated in torchaudio 2.9 but present
and working in 2.9.1) when it is available, else :func:`viterbi_align`, a small pure-torch CTC
Viterbi that finds the same best path (checked against it in the tests); merging repeated labels
as ``torchaudio.functional.merge_tokens`` does gives each character's own frames, and the blank
frames around them are then given to a character (see :func:`durations_from_spans`)
so the durations cover every frame.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import torch
import torchaudio.functional as AF

from voicespec.eval.recognizer import BLANK, CtcAsr


def min_frames(targets: Sequence[int]) -> int:
    """Fewest frames a CTC path for ``targets`` needs: one per token + a blank between repeats."""
    return len(targets) + sum(a == b for a, b in zip(targets, targets[1:]))


def viterbi_align(log_probs: torch.Tensor, targets: Sequence[int], blank: int = BLANK) -> list[int]:
    """Best CTC path: the label (``blank`` or a target) of every frame. ``log_probs [T, C]``.

    States ``0..2L`` interleave blanks (even) and targets (odd); a state is entered from itself,
    the previous state, or (for a target unlike the one two back) skipping the blank between."""
    targets = list(targets)
    n_t, n_s = log_probs.shape[0], 2 * len(targets) + 1
    if not targets or n_t < min_frames(targets):
        raise ValueError(f"cannot align {len(targets)} tokens to {n_t} frames (need {min_frames(targets)})")
    labels = torch.tensor([blank if s % 2 == 0 else targets[s // 2] for s in range(n_s)])
    skip = torch.zeros(n_s, dtype=torch.bool)
    skip[3::2] = labels[3::2] != labels[1:-2:2]
    emit = log_probs.detach().float().cpu()[:, labels]  # [T, S]
    neg = torch.tensor(float("-inf"))
    score = torch.full((n_s,), float("-inf"))
    score[:2] = emit[0, :2]
    back = torch.zeros(n_t, n_s, dtype=torch.long)
    for t in range(1, n_t):
        stay = score
        step = torch.cat([neg[None], score[:-1]])
        jump = torch.where(skip, torch.cat([neg[None].expand(2), score[:-2]]), neg)
        cand = torch.stack([stay, step, jump])  # ties: stay, then step, then jump
        best, arg = cand.max(0)
        back[t] = arg
        score = best + emit[t]
    s = n_s - 1 if score[-1] >= score[-2] else n_s - 2
    path = [0] * n_t
    for t in range(n_t - 1, -1, -1):
        path[t] = int(labels[s])
        s -= int(back[t, s])
    return path


def _torchaudio_align(log_probs: torch.Tensor, targets: Sequence[int], blank: int) -> list[int] | None:
    """``torchaudio.functional.forced_align``'s path, or None where it is gone or fails."""
    fn = getattr(AF, "forced_align", None)
    if fn is None:
        return None
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # deprecated in torchaudio 2.9
            emission = log_probs.detach().float().cpu().contiguous()[None]
            path, _ = fn(emission, torch.tensor([list(targets)], dtype=torch.int32), blank=blank)
        return path[0].tolist()
    except Exception:
        return None


def _merge_spans(path: Sequence[int], blank: int = BLANK) -> list[tuple[int, int]]:
    """``(start, end)`` frames of each token in a CTC path (repeats merged, blanks dropped); the
    same as ``torchaudio.functional.merge_tokens`` without the scores."""
    spans, start = [], 0
    for t in range(1, len(path) + 1):
        if t == len(path) or path[t] != path[start]:
            if path[start] != blank:
                spans.append((start, t))
            start = t
    return spans


def char_spans(log_probs: torch.Tensor, targets: Sequence[int], blank: int = BLANK,
               backend: str = "auto") -> list[tuple[int, int]]:
    """Forced alignment: ``(start, end)`` (end exclusive) of the frames each target token is
    emitted on, in order; blank frames belong to no token. ``backend``: "torchaudio",
    "viterbi" or "auto" (torchaudio when it works, else the Viterbi here)."""
    targets = list(targets)
    if blank in targets:
        raise ValueError("targets must not contain the blank id")
    if not targets or log_probs.shape[0] < min_frames(targets):
        raise ValueError(f"cannot align {len(targets)} characters to {log_probs.shape[0]} frames "
                         f"(need at least {min_frames(targets)}: the audio is too short for the text)")
    path = _torchaudio_align(log_probs, targets, blank) if backend in ("auto", "torchaudio") else None
    if path is None:
        if backend == "torchaudio":
            raise RuntimeError("torchaudio.functional.forced_align is not available")
        path = viterbi_align(log_probs, targets, blank)
    spans = _merge_spans(path, blank)
    if [path[s] for s, _ in spans] != targets:
        raise RuntimeError(f"alignment path does not spell the targets ({len(spans)} spans for {len(targets)} tokens)")
    return spans


def durations_from_spans(spans: Sequence[tuple[int, int]], n_frames: int) -> list[int]:
    """Per-token frame counts covering all ``n_frames``: each token owns its own frames plus the
    blank frames after it (up to the next token); blank frames before the first token go to the
    first token. Every token gets >= 1 frame; the sum is ``n_frames``."""
    if not spans:
        raise ValueError("no spans")
    starts = [0] + [s for s, _ in spans[1:]] + [n_frames]
    return [b - a for a, b in zip(starts, starts[1:])]


def ctc_durations(log_probs: torch.Tensor, targets: Sequence[int], blank: int = BLANK,
                  backend: str = "auto") -> list[int]:
    """Forced-alignment durations (frames per target token, summing to ``T``) from ``[T, C]``."""
    return durations_from_spans(char_spans(log_probs, targets, blank, backend), log_probs.shape[0])


def align(model: CtcAsr, pcm: torch.Tensor | np.ndarray, sample_rate: int, text: str) -> list[int]:
    """Frames (50 Hz, ``ceil(N16 / 320)`` in all, the codec's count) spoken for each character of
    ``text`` (normalized, every character in the model's alphabet), by CTC forced alignment. Blank
    frames go to the preceding character (leading ones to the first): ``len(result) ==
    len(text)``, every entry >= 1, ``sum(result)`` = the frame count."""
    unknown = sorted(set(text) - set(model.config.alphabet))
    if unknown:
        raise ValueError(f"text has characters outside the ASR alphabet: {''.join(unknown)!r}")
    if not text:
        raise ValueError("nothing to align: empty text")
    return ctc_durations(model.log_probs(pcm, sample_rate), model.tokenizer.encode(text))
