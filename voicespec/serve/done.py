"""The statistics a finished context reports (the WebSocket ``done`` message, the OpenAI
endpoint's ``speech.audio.done`` event), computed once for every door, and recorded in the
server's metrics."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import Job


def done_stats(job: Job, samples: int, t_ready: float, t_first_audio: float | None,
               metrics: ServerMetrics | None = None) -> dict[str, Any]:
    """``samples``: audio samples the client was sent; ``t_ready``: when its first text was handed
    to synthesis; ``t_first_audio``: when its first audio went out (``perf_counter`` times)."""
    st = job.stream.stats
    d = st.decode
    audio_s = samples / st.sample_rate
    ttfa = None if t_first_audio is None else t_first_audio - t_ready
    gammas = d.gammas
    decode = job.stream.options.decode
    cap = decode.controller.time_cap_s
    stats = {
        "ttfa_ms": None if ttfa is None else round(ttfa * 1000, 2),
        "audio_s": round(audio_s, 4),
        "samples": samples,
        "compute_s": round(job.busy_s, 4),
        "rtf": round(job.busy_s / audio_s, 4) if audio_s else None,
        "wall_s": round(time.perf_counter() - t_ready, 4),
        "sentences": st.sentences,
        "frames": st.frames,
        "steps": d.generated_steps,
        "target_passes": d.target_passes,
        "drafted": d.drafted,
        "accepted": d.accepted,
        "acceptance": round(d.acceptance_rate, 4),
        "acceptance_rule": decode.sampling.acceptance,  # "exact", or "lossy-top-N" when the client opted in
        "coupling": decode.sampling.coupling,
        "mean_accepted_length": round(d.mean_accepted_length, 4),
        "drafter": job.stream.options.drafter,
        "gamma": decode.gamma,
        "gamma_mean": round(sum(gammas) / len(gammas), 3) if gammas else 0.0,
        "gamma_counts": dict(Counter(map(str, gammas))),  # a tree pass counts under its depth
        "tree_passes": d.tree_passes,
        "latency_budget_ms": None if cap is None else round(cap * 1000, 3),
        "finish_reason": d.finish_reason,
    }
    if metrics is not None:
        metrics.record_done(ttfa, stats, d)
    return stats
