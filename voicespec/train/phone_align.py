"""Durations for our phoneme units from the teacher's own alignment.

Piper reports how many samples it spoke for every symbol of its (espeak-ng) phoneme string;
our units come from gruut. The two IPA strings mostly agree symbol for symbol ("plˈiːz" vs
``p l ˈi z``), so the durations transfer by a global alignment of the two *character* sequences
(Needleman-Wunsch): identical characters cost 0, two vowels or known espeak/gruut variants
(ɐ/ə, ᵻ/ɪ, ɾ/t, ɜ/ɚ ...) 0.4, a word boundary against a break 0.3, anything else 1, a gap 0.6.
Each teacher character's samples go to the unit that owns the character it aligned with (a
character aligned with nothing joins the unit before it); stress and length marks, which Piper
gives samples of their own, join the next or the previous character. The fraction of our
characters matched by an identical teacher character is returned, so the transfer is measured,
not assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VOWELS = set("aeiouæɑɐɒɔəɛɚɜɝɪʊʌᵻy")
BOUNDARIES = set(" ,.?!;:")
JOIN_NEXT = {"ˈ", "ˌ"}  # espeak stress marks precede the vowel they stress
JOIN_PREV = {"ː", "ʲ", "̃", "̩", "ˑ"}  # length and diacritic marks follow their symbol
EDGE = {"^", "$", "_"}  # Piper's sentence start/end (and pad) symbols: silence at the edges
SIMILAR = {frozenset(p) for p in ("ɐə", "ᵻɪ", "ɾt", "ɾd", "ɜɚ", "ɝɚ", "ɚə", "ɹɚ", "ʔt", "ɬl", "oɔ", "eɛ", "ɡg", "ɑɒ")}
GAP = 0.6


@dataclass(frozen=True)
class Transfer:
    samples: list[int]  # teacher samples per unit (sum = all the teacher's samples)
    agreement: float  # fraction of our characters matched by an identical teacher character


def _unit_chars(unit: str) -> str:
    return "".join(c for c in unit if c not in JOIN_NEXT and c != "͡")


def _cost(a: str, b: str) -> float:
    if a == b:
        return 0.0
    if a in BOUNDARIES and b in BOUNDARIES:
        return 0.3
    if a in BOUNDARIES or b in BOUNDARIES:
        return 1.5
    if frozenset((a, b)) in SIMILAR or (a in VOWELS and b in VOWELS):
        return 0.4
    return 1.0


def teacher_chars(phonemes: list[str], samples: list[int]) -> tuple[list[str], list[int], int, int]:
    """Piper's symbols as plain characters with their samples (marks merged into neighbours), the
    samples before the first character, and those of stress marks left with no character after them."""
    chars: list[str] = []
    counts: list[int] = []
    lead = tail = carry = 0
    for p, n in zip(phonemes, samples):
        if p in EDGE:  # a sentence start/end inside the text: the pause belongs to the symbol before
            if chars:
                counts[-1] += n
            else:
                lead += n
        elif p in JOIN_NEXT:
            carry += n
        elif p in JOIN_PREV and counts:
            counts[-1] += n
        else:
            for i, c in enumerate(p):
                chars.append(c)
                counts.append((n + carry) if i == 0 else 0)
                carry = 0
    if carry:
        tail += carry
    return chars, counts, lead, tail


def align(a: list[str], b: list[str]) -> list[int]:
    """For each character of ``a``, the index of the character of ``b`` it aligns with, or -1."""
    n, m = len(a), len(b)
    cost = np.array([[_cost(x, y) for y in b] for x in a], dtype=np.float64).reshape(n, m)
    D = np.zeros((n + 1, m + 1))
    D[:, 0] = np.arange(n + 1) * GAP
    D[0, :] = np.arange(m + 1) * GAP
    move = np.zeros((n + 1, m + 1), dtype=np.int8)  # 0 diagonal, 1 gap in b (skip a[i]), 2 gap in a
    move[1:, 0], move[0, 1:] = 1, 2
    for i in range(1, n + 1):
        row, prev, c = D[i], D[i - 1], cost[i - 1]
        diag = prev[:-1] + c
        up = prev[1:] + GAP
        best = np.minimum(diag, up)
        mv = np.where(diag <= up, 0, 1).astype(np.int8)
        # left moves chain along the row: resolve them in a short Python pass
        for j in range(1, m + 1):
            left = row[j - 1] + GAP
            if left < best[j - 1]:
                row[j], move[i, j] = left, 2
            else:
                row[j], move[i, j] = best[j - 1], mv[j - 1]
    out = [-1] * n
    i, j = n, m
    while i > 0 or j > 0:
        mv = move[i, j]
        if mv == 0:
            out[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif mv == 1:
            i -= 1
        else:
            j -= 1
    return out


def transfer(units: list[str], phonemes: list[str], samples: list[int]) -> Transfer:
    """Teacher samples per unit of ``units`` (gruut) from Piper's ``phonemes`` and ``samples``."""
    if not units:
        raise ValueError("no units to align")
    owner: list[int] = []
    ours: list[str] = []
    for u, unit in enumerate(units):
        for c in _unit_chars(unit):
            ours.append(c)
            owner.append(u)
    chars, counts, lead, tail = teacher_chars(phonemes, samples)
    out = [0] * len(units)
    out[0] += lead
    out[-1] += tail
    matched = 0
    if chars and ours:
        mapping = align(chars, ours)
        last = 0
        for i, j in enumerate(mapping):
            if j >= 0:
                last = owner[j]
                matched += chars[i] == ours[j]
            out[last] += counts[i]
    else:
        out[-1] += sum(counts)
    return Transfer(out, matched / max(len(ours), 1))


def to_frames(unit_samples: list[int], sample_rate: int, frame_rate: float, n_frames: int) -> list[int]:
    """Samples per unit to frames per unit summing to exactly ``n_frames`` (rounded at the
    cumulative boundaries, so errors never accumulate; the last unit absorbs the codec's padding)."""
    bounds = np.round(np.cumsum(unit_samples) * frame_rate / sample_rate).astype(int)
    bounds = np.minimum(bounds, n_frames)
    bounds[-1] = n_frames
    return np.diff(bounds, prepend=0).tolist()
