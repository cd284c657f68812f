"""Leviathan et al.'s model of speculative decoding, fed with measured numbers.

With a per-token acceptance rate α (i.i.d.), a γ-step draft commits on average
``E(α, γ) = (1 - α^(γ+1)) / (1 - α)`` steps per verify pass, and the pass costs
``γ·c_draft + c_verify(γ)``; plain decoding costs ``c_plain`` per step. The ideal speedup is
``E · c_plain / (γ·c_draft + c_verify(γ))``: what speculation would give if the only costs were
the model passes. Measured speedup over ideal (the *efficiency*) is what survives bookkeeping,
rollbacks, uneven acceptance and prefill.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def expected_tokens(alpha: float | None, gamma: int) -> float:
    """Steps one verify pass commits on average: ``(1 - α^(γ+1)) / (1 - α)`` (γ+1 when α = 1)."""
    if gamma == 0 or not alpha:
        return 1.0
    if alpha >= 1.0:
        return float(gamma + 1)
    return (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def alpha_from_trace(trace: Iterable[tuple[int, int]]) -> float | None:
    """Maximum-likelihood α from per-pass ``(drafted, accepted)`` steps: each accepted step is a
    success and each draft cut short is one failure (positions after a rejection were never
    tried). None when nothing was drafted."""
    accepted = rejected = 0
    for drafted, acc in trace:
        accepted += acc
        rejected += acc < drafted
    trials = accepted + rejected
    return accepted / trials if trials else None


def ideal_speedup(
    alpha: float | None, draft_lengths: Sequence[int], draft_s: float, verify_s: float, plain_pass_s: float
) -> float:
    """Ideal speedup of a run whose passes drafted ``draft_lengths`` steps, given its measured
    draft and verify seconds and plain decoding's seconds per target pass.

    ``Σ_t E(α, γ_t) · c_plain / Σ_t (γ_t·c_draft + c_verify(γ_t))``, where the denominator *is* the
    measured ``draft_s + verify_s``; with a fixed γ this is exactly Leviathan's
    ``E(α, γ) · c_plain / (γ·c_draft + c_verify(γ))``, and it also covers adaptive γ."""
    cost = draft_s + verify_s
    if not draft_lengths or cost <= 0:
        raise ValueError("an ideal speedup needs at least one measured pass")
    return plain_pass_s * sum(expected_tokens(alpha, g) for g in draft_lengths) / cost


def efficiency(measured_speedup: float, ideal: float) -> float:
    """Fraction of the ideal speedup actually obtained (above 1 when speculation also amortises
    per-step overhead that the ideal model ignores)."""
    return measured_speedup / ideal
