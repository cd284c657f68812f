"""The bench's outputs: ``bench.json`` (every figure and the exact configuration), ``report.md``
(the tables, also printed) and the PNG plots. Everything renders from the result dict alone, so a
report can be rebuilt from an old JSON file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def _f(x: float | None, fmt: str = ".2f") -> str:
    return "-" if x is None else format(x, fmt)


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


def _pcts(p: dict[str, float | None], fmt: str = ".0f") -> str:
    return "/".join(_f(p[k], fmt) for k in ("p50", "p95", "p99"))


def _speedup(s: dict[str, Any] | None) -> str:
    if not s or s["median"] is None:
        return "-"
    return f"{s['median']:.2f}x ({s['min']:.2f}–{s['max']:.2f})"


def _split(t: dict[str, float] | None) -> str:
    if not t:
        return "-"
    total = sum(t.values()) or 1.0
    return "/".join(f"{100 * t[k] / total:.0f}" for k in ("draft", "verify", "other", "prefill"))


def _decode_section(mode: str, d: dict[str, Any]) -> str:
    rows = []
    for m in d["methods"].values():
        check = "-" if m["mismatches"] is None else ("identical" if m["mismatches"] == 0 else f"**MISMATCH x{m['mismatches']}**")
        if m.get("fine_ties"):
            check += f" (fine-stage float tie x{m['fine_ties']})"
        peer = f"{_speedup(m['speedup_vs_peer'])} vs {m['peer']}" if m["speedup_vs_peer"] else "-"
        rows.append([
            m["method"], _f(m["steps_per_s"], ".0f"), _f(m["audio_s_per_s"]), _speedup(m["speedup"]), peer,
            _f(m["acceptance_rate"]), _f(m["mean_accepted_length"]), _f(m["alpha"]),
            " ".join(f"{a:.2f}" for a in m["per_position_acceptance"][:8]) or "-", _f(m["draft_cost"]),
            _f(m["ideal_speedup"]) + ("x" if m["ideal_speedup"] else ""), _f(m["efficiency"]), _split(m["time_s"]), check,
        ])
    header = ["method", "steps/s", "audio s/s", "speedup (min–max)", "vs transformers", "accept", "len", "α",
              "accept by position", "draft cost (× pass)", "ideal", "efficiency", "draft/verify/other/prefill %", "tokens"]
    return f"## Decoding — {mode}\n\n" + _table(header, rows)


def _streaming_section(s: dict[str, Any], prebuffer_ms: float) -> str:
    rows = [[name, _pcts(m["ttfa_ms"]), _f(m["rtf"]["p50"], ".3f"), _pcts(m["gap_ms"]), str(m["underruns"]),
             _f(m["stall_ms"], ".0f"), _f(m["worst_lead_ms"], ".0f")] for name, m in s["methods"].items()]
    header = ["method", "TTFA p50/p95/p99 ms", "RTF p50", "gap p50/p95/p99 ms", "underruns", "stall ms", "worst lead ms"]
    return (f"## Streaming — the voice's sampling, real-time player with {prebuffer_ms:g} ms prebuffer\n\n"
            + _table(header, rows))


def _load_section(load: dict[str, Any]) -> str:
    rows = [[lv["method"], str(lv["clients"]), _pcts(lv["ttfa_ms"]), f"{lv['underruns']} ({lv['clients_with_underruns']})",
             _f(lv["stall_ms"], ".0f"), _f(lv["worst_lead_ms"], ".0f"), _f(lv["server_rtf"]["p50"], ".3f"),
             str(len(lv["errors"]))] for lv in load["levels"]]
    header = ["method", "clients", "TTFA p50/p95/p99 ms", "underruns (clients)", "stall ms", "worst lead ms",
              "server RTF p50", "errors"]
    cap = ", ".join(f"{name}: {n}" for name, n in load["capacity"].items())
    fc = load["frame_cache"]
    return ("## WebSocket server under load\n\n" + _table(header, rows)
            + f"\n\nLargest client count with every level up to it clean: {cap}"
            + f"\n\nA repeated sentence (frame cache): TTFA {fc['miss_ttfa_ms']:.0f} ms decoded, {fc['hit_ttfa_ms']:.0f} ms "
              f"replayed (median of {fc['repeats']}); replay equals decode sample for sample: "
              f"{'yes' if fc['hit_equals_miss'] else 'NO'}")


def _probe_section(probe: dict[str, Any]) -> str:
    rows = [[str(lv["clients"]), str(lv["clients"] - lv["clients_with_underruns"] - len(lv["errors"])), _pcts(lv["ttfa_ms"]),
             _f(lv["stall_ms"], ".0f"), _f(lv["worst_lead_ms"], ".0f"), str(len(lv["errors"]))] for lv in probe["levels"]]
    header = ["clients", "clean", "TTFA p50/p95/p99 ms", "stall ms", "worst lead ms", "errors"]
    return (f"## Outside probe — `voicespec serve {' '.join(probe['server_args'])}` in its own process, "
            f"every client at once, two new sentences each, {probe['prebuffer_ms']:g} ms prebuffer\n\n"
            + _table(header, rows) + "\n\nLargest client count with it and every smaller one clean"
            + (f" (first audio p95 within {probe['budget_ms']:g} ms)" if probe.get("budget_ms") else "")
            + f": {probe['largest_clean']}")


def _batching_section(levels: list[dict[str, Any]]) -> str:
    rows = [[str(lv["sessions"]), _f(lv["ms_per_tick"], ".1f"), _f(lv["mean_batch"], ".1f"), _f(lv["steps_per_s"], ".0f"),
             _f(lv["audio_x_realtime"], ".1f"), str(lv["errors"])] for lv in levels]
    header = ["sessions", "ms per tick", "mean batch", "session-steps/s", "audio × real time (all)", "errors"]
    return ("## Batched engine (no sockets)\n\nEvery active session's target pass, fine stage and codec call batched "
            "per tick (plain decoding, the voice's sampling).\n\n" + _table(header, rows))


def _memory_section(mem: dict[str, Any]) -> str:
    parts = [f"peak RSS {mem['peak_rss_mb']:.0f} MB", f"voice {_f(mem['voice_rss_mb'], '.0f')} MB"]
    parts += [f"drafter {n}: weights {d['weights_mb']:.1f} MB, RSS +{d['rss_delta_mb']:.1f} MB" for n, d in mem["drafters"].items()]
    return "## Memory\n\n" + "; ".join(parts)


def _budget_section(budget: dict[str, Any]) -> str:
    ms = budget["budget_ms"]
    rows = [[v["method"], _f(v["ttfa_p95_ms"], ".0f"), str(v["underruns"]), "PASS" if v["passed"] else f"FAIL: {v['reason']}"]
            for v in budget["verdicts"]]
    return (f"## Latency budget: TTFA p95 <= {ms:g} ms and no underruns\n\n"
            + _table(["method", "TTFA p95 ms", "underruns", "result"], rows))


def markdown(result: dict[str, Any], images: Sequence[str] = ()) -> str:
    cfg, env, voice = result["config"], result["environment"], result["voice"]
    peers = ", ".join(result["decode"]["peers"]) or (
        "off" if not cfg["peer"] or "greedy" not in cfg["modes"] else "none (they need a flat-layout transformers target)")
    head = (f"# voicespec bench — voice {voice['name']} ({voice['layout']} layout)\n\n"
            f"{len(cfg['prompts'])} prompts ({len(voice['sentences'])} sentences), γ {', '.join(map(str, cfg['gammas']))} and auto, "
            f"{cfg['repeats']} interleaved round(s), {cfg['warmup']} warm-up, max {cfg['max_steps']} steps per sentence; "
            f"{env['cpu_affinity'] or env['cpu_count']} CPUs, torch {env['packages']['torch']} ({env['torch_threads']} threads, "
            f"multi-row products on {env.get('cpu_linear', 'default')}), "
            f"transformers {env['packages']['transformers']}; bench wall {result['wall_s']:.0f} s.\n\n"
            "Speedups are medians of per-pair ratios (each method against the baseline on the same sentence, "
            "back to back); ideal = Leviathan's E(α, γ)·c_plain / (γ·c_draft + c_verify) from measured α and costs; "
            "len = steps committed per target pass.\n\n"
            f"Voice: {voice.get('path', voice['name'])}. transformers peers: {peers}.")
    sections = [head] + [_decode_section(mode, d) for mode, d in result["decode"]["modes"].items()]
    sections.append(_streaming_section(result["streaming"], cfg["prebuffer_ms"]))
    if result.get("batching"):
        sections.append(_batching_section(result["batching"]))
    if result["load"]:
        sections.append(_load_section(result["load"]))
    if result.get("probe"):
        sections.append(_probe_section(result["probe"]))
    sections.append(_memory_section(result["memory"]))
    sections.append(_budget_section(result["budget"]) if result["budget"]["budget_ms"] is not None else
                    "## Underruns\n\n" + ", ".join(f"{v['method']}: {v['reason']}" for v in result["budget"]["verdicts"]))
    if result["mismatches"]:
        sections.append(f"**FAILED: {result['mismatches']} greedy run(s) differ from plain decoding.**")
    sections += [f"![{Path(p).stem}]({Path(p).name})" for p in images]
    return "\n\n".join(sections) + "\n"


def write_outputs(result: dict[str, Any], out: Path, plots: bool = True) -> list[Path]:
    """Write ``bench.json``, the PNGs (when asked and matplotlib is installed) and ``report.md``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "bench.json"]
    paths[0].write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    images: list[Path] = []
    if plots:
        from voicespec.bench.plots import write_plots

        images = write_plots(result, out)
    md = out / "report.md"
    md.write_text(markdown(result, [str(p) for p in images]))
    return [*paths, md, *images]
