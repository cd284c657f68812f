"""PNG plots of a bench result (matplotlib, headless). Without matplotlib: no plots, a notice."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any


def _legend(ax, integer_x: bool = False) -> None:
    """A legend when anything is labelled; integer x ticks for γ, positions and client counts."""
    from matplotlib.ticker import MaxNLocator

    if integer_x:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6)


def _speedup_vs_gamma(result: dict[str, Any], ax_for) -> None:
    for mode, d in result["decode"]["modes"].items():
        ax = ax_for(mode)
        rows = [m for m in d["methods"].values() if m["kind"] == "engine" and m["drafter"] != "none"]
        for drafter in dict.fromkeys(m["drafter"] for m in rows):
            fixed = [m for m in rows if m["drafter"] == drafter and m["gamma"] != "auto"]
            xs = [m["gamma"] for m in fixed]
            med = [m["speedup"]["median"] for m in fixed]
            err = [[a - m["speedup"]["min"] for a, m in zip(med, fixed)],
                   [m["speedup"]["max"] - a for a, m in zip(med, fixed)]]
            line = ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=f"{drafter} measured")[0]
            ax.plot(xs, [m["ideal_speedup"] for m in fixed], ls=":", marker="x", color=line.get_color(),
                    label=f"{drafter} ideal")
            auto = next((m for m in rows if m["drafter"] == drafter and m["gamma"] == "auto"), None)
            if auto and auto["mean_gamma"] is not None:
                ax.plot([auto["mean_gamma"]], [auto["speedup"]["median"]], marker="*", ms=12, color=line.get_color(),
                        ls="none", label=f"{drafter} auto (at mean γ)")
        for peer in (m for m in d["methods"].values() if m["kind"] == "peer"):
            ax.axhline(peer["speedup"]["median"], ls="--", lw=0.8, color="grey")
            ax.annotate(peer["method"], (ax.get_xlim()[0], peer["speedup"]["median"]), fontsize=6, color="grey")
        ax.axhline(1.0, color="black", lw=0.8)
        ax.set(title=f"speedup vs γ — {mode}", xlabel="γ (draft steps per pass)", ylabel="speedup vs plain")
        _legend(ax, integer_x=True)


def _acceptance(result: dict[str, Any], ax_for) -> None:
    for mode, d in result["decode"]["modes"].items():
        ax = ax_for(mode)
        for m in d["methods"].values():
            if m["per_position_acceptance"]:
                pos = range(1, len(m["per_position_acceptance"]) + 1)
                ax.plot(pos, m["per_position_acceptance"], marker=".", label=m["method"])
        ax.set(title=f"acceptance per draft position — {mode}", xlabel="draft position", ylabel="accepted", ylim=(0, 1.05))
        _legend(ax, integer_x=True)


def write_plots(result: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install matplotlib)", file=sys.stderr)
        return []
    paths = []

    def save(name: str, fig) -> None:
        fig.tight_layout()
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        paths.append(out / name)

    def per_mode(name: str, draw) -> None:
        modes = list(result["decode"]["modes"])
        fig, axes = plt.subplots(1, len(modes), figsize=(6 * len(modes), 4.2), squeeze=False)
        draw(result, dict(zip(modes, axes[0])).__getitem__)
        save(name, fig)

    per_mode("speedup_vs_gamma.png", _speedup_vs_gamma)
    per_mode("acceptance_per_position.png", _acceptance)

    streaming = result["streaming"]
    methods = list(streaming["methods"])
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(methods)), 4))
    ttfa = [[1000 * r["ttfa_s"] for r in streaming["runs"] if r["method"] == m and r["ttfa_s"] is not None] for m in methods]
    ax.boxplot(ttfa, showmeans=True)
    ax.set_xticks(range(1, len(methods) + 1), methods, rotation=30, ha="right", fontsize=7)
    if result["budget"]["budget_ms"] is not None:
        ax.axhline(result["budget"]["budget_ms"], color="red", ls="--", label="latency budget")
        _legend(ax)
    ax.set(title="time to first audio", ylabel="TTFA (ms)")
    save("ttfa.png", fig)

    fig, ax = plt.subplots(figsize=(8, 4.2))
    for m in methods:  # each method's worst run: the smallest lead it ever had
        runs = [r for r in streaming["runs"] if r["method"] == m and r["lead"]]
        if not runs:
            continue
        worst = min(runs, key=lambda r: min(p[1] for p in r["lead"]))
        t, lead, stalled = zip(*worst["lead"])  # (seconds, lead, stalled) per arrival: serve.playout.playout_timeline
        ax.plot(t, [1000 * x for x in lead], lw=1, label=m)
        under = [(a, 1000 * b) for a, b, s in worst["lead"] if s]
        if under:
            ax.plot(*zip(*under), "x", color="red", ms=7)
    ax.axhline(0, color="black", lw=0.8)
    ax.set(title=f"audio lead over time (worst run per method; x = underrun; prebuffer {result['config']['prebuffer_ms']:g} ms)",
           xlabel="seconds since request", ylabel="buffered audio ahead of the player (ms)")
    _legend(ax)
    save("audio_lead.png", fig)

    if result["load"]:
        fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4))
        levels = result["load"]["levels"]
        for m in dict.fromkeys(lv["method"] for lv in levels):
            mine = [lv for lv in levels if lv["method"] == m]
            n = [lv["clients"] for lv in mine]
            line = a1.plot(n, [lv["ttfa_ms"]["p50"] for lv in mine], marker="o", label=f"{m} p50")[0]
            a1.plot(n, [lv["ttfa_ms"]["p95"] for lv in mine], marker="^", ls="--", color=line.get_color(), label=f"{m} p95")
            a2.plot(n, [lv["underruns"] for lv in mine], marker="o", label=m)
        if result["budget"]["budget_ms"] is not None:
            a1.axhline(result["budget"]["budget_ms"], color="red", ls="--", label="latency budget")
        a1.set(title="TTFA vs concurrent clients", xlabel="clients", ylabel="TTFA (ms)")
        a2.set(title="underruns vs concurrent clients", xlabel="clients", ylabel="underruns (all clients)")
        _legend(a1, integer_x=True)
        _legend(a2, integer_x=True)
        save("concurrency.png", fig)
    return paths
