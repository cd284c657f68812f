"""Per-method figures from the runs of one mode: throughput, pairwise speedups, acceptance, the
time split, and the ideal speedup (:mod:`.ideal`) with the efficiency measured against it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from voicespec.engine.stats import DecodeStats
from voicespec.bench.dist import ratio_summary
from voicespec.bench.ideal import alpha_from_trace, efficiency, ideal_speedup
from voicespec.bench.runner import Method, Run, fine_ties, mismatches


@dataclass
class MethodSummary:
    """``speedup``/``speedup_vs_peer``: median/min/max of per-pair rate ratios. ``alpha``: the
    i.i.d. acceptance estimate behind ``ideal_speedup``; ``per_position_acceptance[i]``: fraction of
    drafts reaching position i whose step i was accepted. ``draft_step_s``/``verify_pass_s``:
    measured c_draft and c_verify; ``draft_cost``: c_draft in units of a plain target pass.
    ``mismatches``: runs whose verified steps differ from the baseline's (greedy and exact only,
    else None); ``fine_ties``: runs with the same steps whose fine-stage codes differ at a float
    near-tie (:func:`~voicespec.bench.runner.fine_ties`). ``acceptance``: ``exact`` or the LOSSY rule the method ran with."""

    method: str
    kind: str
    drafter: str
    gamma: int | str | None
    runs: int
    steps: int
    frames: int
    wall_s: float
    steps_per_s: float
    audio_s_per_s: float | None
    speedup: dict[str, Any]
    peer: str | None
    speedup_vs_peer: dict[str, Any] | None
    mismatches: int | None
    fine_ties: int | None
    acceptance_rate: float | None
    mean_accepted_length: float | None
    mean_gamma: float | None
    alpha: float | None
    per_position_acceptance: list[float]
    time_s: dict[str, float] | None
    draft_step_s: float | None
    draft_cost: float | None
    verify_pass_s: float | None
    ideal_speedup: float | None
    efficiency: float | None
    acceptance: str = "exact"


def merged_stats(runs: Sequence[Run]) -> DecodeStats:
    total = DecodeStats()
    for r in runs:
        total.merge(r.stats)
    return total


def _pair_ratios(runs: Sequence[Run], method: str, other: str) -> list[float]:
    rates = {(r.method, r.case, r.round): r.rate for r in runs}
    return [rates[method, c, k] / rates[other, c, k] for (m, c, k) in rates if m == method and (other, c, k) in rates]


def summarize(methods: Sequence[Method], runs: Sequence[Run], baseline: str, frame_rate: float | None,
              greedy: bool) -> dict[str, MethodSummary]:
    """``baseline``: the plain-decoding engine method every speedup is relative to; ``frame_rate``
    (codec frames per second) turns frames into audio seconds (None: not reported)."""
    plain = merged_stats([r for r in runs if r.method == baseline])
    plain_pass_s = plain.verify_s / plain.target_passes
    wrong = mismatches(runs, baseline) if greedy else {}
    ties = fine_ties(runs, baseline) if greedy else {}
    ran = {r.method for r in runs}
    out = {}
    for m in methods:
        mine = [r for r in runs if r.method == m.name]
        lossy = getattr(m, "lossy_top_k", 0)
        steps, wall = sum(r.steps for r in mine), sum(r.wall_s for r in mine)
        frames = sum(r.frames for r in mine)
        row: dict[str, Any] = dict(
            method=m.name, kind=m.kind, drafter=m.drafter_name, gamma=m.gamma, runs=len(mine), steps=steps,
            frames=frames, wall_s=wall, steps_per_s=steps / wall,
            audio_s_per_s=frames / frame_rate / wall if frame_rate else None,
            speedup=ratio_summary(_pair_ratios(runs, m.name, baseline)), peer=m.peer,
            speedup_vs_peer=ratio_summary(_pair_ratios(runs, m.name, m.peer)) if m.peer in ran else None,
            mismatches=wrong.get(m.name) if greedy and not lossy else None,
            fine_ties=ties.get(m.name) if greedy and not lossy else None,
            acceptance=f"lossy-top-{lossy}" if lossy else "exact",
        )
        row.update(_engine_figures(mine, plain_pass_s, row["speedup"]["median"]) if m.kind == "engine" else _NO_ENGINE)
        out[m.name] = MethodSummary(**row)
    return out


_NO_ENGINE: dict[str, Any] = dict(
    acceptance_rate=None, mean_accepted_length=None, mean_gamma=None, alpha=None, per_position_acceptance=[],
    time_s=None, draft_step_s=None, draft_cost=None, verify_pass_s=None, ideal_speedup=None, efficiency=None,
)


def _engine_figures(runs: Sequence[Run], plain_pass_s: float, measured: float | None) -> dict[str, Any]:
    s = merged_stats(runs)
    trace = [t for r in runs for t in r.trace]
    lengths = [d for d, _ in trace]
    alpha = alpha_from_trace(trace)
    ideal = ideal_speedup(alpha, lengths, s.draft_s, s.verify_s, plain_pass_s)
    drafted = s.drafted > 0
    return dict(
        acceptance_rate=s.acceptance_rate if drafted else None,
        mean_accepted_length=s.mean_accepted_length,
        mean_gamma=sum(s.gammas) / len(s.gammas) if s.gammas else None,
        alpha=alpha,
        per_position_acceptance=[a / d for a, d in zip(s.per_position_accepted, s.per_position_drafted)],
        time_s={"prefill": s.prefill_s, "draft": s.draft_s, "verify": s.verify_s, "other": s.other_s},
        draft_step_s=s.draft_s / s.drafted if drafted else None,
        draft_cost=s.draft_s / s.drafted / plain_pass_s if drafted else None,
        verify_pass_s=s.verify_s / s.target_passes,
        ideal_speedup=ideal,
        efficiency=efficiency(measured, ideal) if measured is not None else None,
    )
