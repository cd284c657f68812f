"""Streaming as a listener hears it: text → :class:`~voicespec.pipeline.synthesis.SynthesisStream` → chunk
arrival times → a real-time player with a prebuffer (:func:`voicespec.serve.playout.playout`).

TTFA counts from the request (front end included) to the first audio; an underrun is the player
running dry before the next chunk arrives.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from voicespec.serve.playout import LeadPoint, gaps, playout, playout_timeline
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.tree_shapes import TreeSpec
from voicespec.pipeline.synthesis import SynthesisOptions, SynthesisStream
from voicespec.pipeline.voice import Voice
from voicespec.bench.dist import percentiles


@dataclass(frozen=True)
class StreamSpec:
    """One streaming configuration: a drafter of the voice at a γ (or with a draft tree)."""

    name: str
    drafter: str
    gamma: int | str
    tree: TreeSpec | None = None


@dataclass
class StreamRun:
    method: str
    prompt: int
    round: int
    sample_rate: int
    arrivals: list[tuple[float, int]]  # (seconds since the request, samples)
    rtf: float
    audio_s: float
    wall_s: float
    playout: dict[str, Any]
    lead: list[LeadPoint]  # (seconds, audio buffered ahead of the player, stalled) at each arrival

    @property
    def ttfa_s(self) -> float | None:
        return self.arrivals[0][0] if self.arrivals else None


def stream_once(voice: Voice, text: str, options: SynthesisOptions, prebuffer_s: float) -> StreamRun:
    t0 = time.perf_counter()
    stream = SynthesisStream(voice, text, options)
    arrivals = [(time.perf_counter() - t0, chunk.pcm.numel()) for chunk in stream]
    st = stream.stats
    return StreamRun("", -1, -1, st.sample_rate, arrivals, st.rtf, st.audio_s, st.wall_s,
                     playout(arrivals, st.sample_rate, prebuffer_s), playout_timeline(arrivals, st.sample_rate, prebuffer_s))


def run_streaming(voice: Voice, specs: Sequence[StreamSpec], texts: Sequence[str], sampling: SamplingConfig,
                  max_steps: int, prebuffer_s: float, repeats: int = 1, warmup: int = 1, seed: int = 0) -> list[StreamRun]:
    """Every spec on each text in turn (interleaved like the decode runs), after warm-up."""
    def options(spec: StreamSpec, i: int) -> SynthesisOptions:
        decode = DecodeConfig(sampling, gamma=spec.gamma, max_steps=max_steps, seed=seed + i, tree=spec.tree)
        return SynthesisOptions(decode, drafter=spec.drafter)

    for _ in range(warmup):
        for spec in specs:
            stream_once(voice, texts[0], options(spec, 0), prebuffer_s)
    runs = []
    for r in range(repeats):
        for i, text in enumerate(texts):
            for spec in specs:
                run = stream_once(voice, text, options(spec, i), prebuffer_s)
                run.method, run.prompt, run.round = spec.name, i, r
                runs.append(run)
    return runs


def summarize_streams(runs: Sequence[StreamRun]) -> dict[str, dict[str, Any]]:
    """Per method: TTFA, RTF and inter-chunk gap percentiles (ms for latencies), underruns."""
    out: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.method for r in runs):
        mine = [r for r in runs if r.method == name]
        leads = [r.playout["min_lead_s"] for r in mine if r.playout["min_lead_s"] is not None]
        out[name] = {
            "runs": len(mine),
            "ttfa_ms": _ms(percentiles([r.ttfa_s for r in mine if r.ttfa_s is not None])),
            "rtf": percentiles([r.rtf for r in mine]),
            "gap_ms": _ms(percentiles([g for r in mine for g in gaps([t for t, _ in r.arrivals])])),
            "chunks": sum(len(r.arrivals) for r in mine),
            "audio_s": sum(r.audio_s for r in mine),
            "underruns": sum(r.playout["underruns"] for r in mine),
            "runs_with_underruns": sum(r.playout["underruns"] > 0 for r in mine),
            "stall_ms": 1000 * sum(r.playout["stall_s"] for r in mine),
            "worst_lead_ms": 1000 * min(leads) if leads else None,
        }
    return out


def _ms(p: dict[str, float | None]) -> dict[str, float | None]:
    return {k: None if v is None else 1000 * v for k, v in p.items()}
