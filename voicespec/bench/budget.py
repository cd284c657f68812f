"""Does a method meet a latency budget? Pure judgement over already-measured figures.

A method passes when its p95 TTFA is within the budget and the player never ran dry. Under load,
the capacity is the largest client count up to which *every* tested count passes — a number a
deployment can rely on, not a lucky level above a failing one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Verdict:
    method: str
    ttfa_p95_ms: float | None
    underruns: int
    passed: bool
    reason: str


def judge(method: str, ttfa_p95_ms: float | None, underruns: int, budget_ms: float | None) -> Verdict:
    """``budget_ms`` None judges underruns only."""
    reasons = []
    if ttfa_p95_ms is None:
        reasons.append("no audio")
    elif budget_ms is not None and ttfa_p95_ms > budget_ms:
        reasons.append(f"TTFA p95 {ttfa_p95_ms:.0f} ms > {budget_ms:g} ms")
    if underruns:
        reasons.append(f"{underruns} underrun{'s' if underruns > 1 else ''}")
    return Verdict(method, ttfa_p95_ms, underruns, not reasons, "; ".join(reasons) or "ok")


def budget_table(streaming: Mapping[str, Mapping[str, Any]], budget_ms: float | None) -> list[Verdict]:
    """One verdict per method of a streaming summary (``ttfa_ms.p95``, ``underruns``)."""
    return [judge(name, s["ttfa_ms"]["p95"], s["underruns"], budget_ms) for name, s in streaming.items()]


def capacity(levels: Sequence[Mapping[str, Any]], budget_ms: float | None) -> int:
    """Largest client count such that it and every smaller tested count pass (0: none does).
    ``levels``: one method's load levels (``clients``, ``ttfa_ms.p95``, ``underruns``, ``errors``)."""
    best = 0
    for level in sorted(levels, key=lambda lv: lv["clients"]):
        if level["errors"] or not judge("", level["ttfa_ms"]["p95"], level["underruns"], budget_ms).passed:
            break
        best = level["clients"]
    return best
