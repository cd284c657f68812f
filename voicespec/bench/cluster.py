"""What Ray costs and buys on one machine (``voicespec bench --cluster``): batch synthesis local vs
on Ray Data with N workers (audio seconds per wall second), and the Ray Serve ingress against the
plain server (TTFA p50/p95 at each client count, the same listeners, one replica so both have
the same compute). Needs the ``cluster`` extra."""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from voicespec.batch import BatchConfig, Item, run_batch, synthesizers
from voicespec.bench.listeners import listen
from voicespec.bench.probe import free_port
from voicespec.engine.config import DecodeConfig
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.serve.config import ServerConfig
from voicespec.serve.protocol import WS_PATH


def _items(texts: Sequence[str], n: int) -> list[Item]:
    return [Item(f"{i:04d}", texts[i % len(texts)], i + 1) for i in range(n)]


def synth_throughput(voice: str | None, texts: Sequence[str], n: int, workers: int, max_steps: int) -> dict[str, Any]:
    """The same ``n`` items written locally (one process) and on Ray Data (``workers`` actors)."""
    from voicespec.cluster.synth import RayConfig, connect, run_batch_ray

    synthesizer_for = synthesizers(voice)
    options = SynthesisOptions(DecodeConfig(synthesizer_for(None).voice.sampling, gamma=4, max_steps=max_steps, seed=0))
    items = _items(texts, n)
    out: dict[str, Any] = {"items": n, "workers": workers}
    with tempfile.TemporaryDirectory() as tmp:
        local = BatchConfig(Path(tmp) / "local", options, progress_bar=False, report_every=0)
        t = time.perf_counter()
        summary = run_batch(items, local, synthesizer_for)
        out["local"] = {"wall_s": time.perf_counter() - t, "audio_s": summary["audio_s"]}
        connect(RayConfig())
        remote = replace(local, out_dir=Path(tmp) / "ray")
        t = time.perf_counter()
        summary = run_batch_ray(items, remote, RayConfig(workers=workers, voice=voice))
        out["ray"] = {"wall_s": time.perf_counter() - t, "audio_s": summary["audio_s"]}
        out["identical_files"] = all((local.out_dir / p.name).read_bytes() == p.read_bytes()
                                     for p in remote.out_dir.glob("*.wav"))
    for side in ("local", "ray"):
        out[side]["audio_per_wall_s"] = out[side]["audio_s"] / out[side]["wall_s"]
    return out


async def _levels(url: str, texts: Sequence[str], levels: Sequence[int], prebuffer_s: float) -> list[dict[str, Any]]:
    return [(await listen(url, "plain", "none", 0, texts, n, prebuffer_s, 0)).to_dict() for n in levels]


def serving_overhead(voice: str | None, texts: Sequence[str], levels: Sequence[int], max_steps: int,
                     prebuffer_s: float = 0.2) -> dict[str, Any]:
    """TTFA and underruns at each client count: the plain server, then the Ray Serve ingress in
    front of one replica of it. Plain decoding in both (the ingress is what is measured)."""
    from ray import serve

    from voicespec.cluster.serve import RayServeConfig, build_app
    from voicespec.serve.server import TTSServer

    config = ServerConfig(port=0, voice=voice, max_sessions=max(levels), max_steps=max_steps, ping_interval_s=None,
                          frame_cache_mb=0)

    async def plain() -> list[dict[str, Any]]:
        async with TTSServer(config) as server:
            return await _levels(f"ws://127.0.0.1:{server.port}{WS_PATH}", texts, levels, prebuffer_s)

    out = {"plain": asyncio.run(plain())}
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        serve.run(build_app(config, RayServeConfig(replicas=1, min_replicas=1, max_replicas=1,
                                                   sessions_per_replica=max(levels), replica_cpus=1)),
                  name="voicespec", route_prefix="/")
        out["ray"] = asyncio.run(_levels(f"ws://127.0.0.1:{port}{WS_PATH}", texts, levels, prebuffer_s))
    finally:
        serve.shutdown()
    return out


def run_cluster_bench(voice: str | None, texts: Sequence[str], out_dir: Path, items: int = 16, workers: int = 2,
                      levels: Sequence[int] = (1, 8), max_steps: int = 400) -> dict[str, Any]:
    import ray

    from voicespec.bench.machine import environment

    result = {"machine": environment(), "synth": synth_throughput(voice, texts, items, workers, max_steps),
              "serve": serving_overhead(voice, texts, levels, max_steps)}
    ray.shutdown()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "cluster.json").write_text(json.dumps(result, indent=1) + "\n")
    (out_dir / "cluster.md").write_text(markdown(result))
    return result


def markdown(r: dict[str, Any]) -> str:
    s = r["synth"]
    m = r["machine"]
    lines = [f"Machine: {m['platform']}, {m['cpu_count']} CPUs, torch threads {m['torch_threads']}, "
             f"load average at start {m['load_average']}", "",
             f"Batch synthesis, {s['items']} items (fixed γ = 4, seeded): files identical local vs Ray: "
             f"{s['identical_files']}", "", "| runner | wall s | audio s | audio s per wall s |", "| --- | --- | --- | --- |"]
    for side, name in (("local", "local (one process)"), ("ray", f"Ray Data, {s['workers']} workers")):
        lines.append(f"| {name} | {s[side]['wall_s']:.1f} | {s[side]['audio_s']:.1f} | {s[side]['audio_per_wall_s']:.2f} |")
    lines += ["", "Serving (plain decoding; the Ray ingress in front of one replica):", "",
              "| server | clients | TTFA p50 ms | TTFA p95 ms | underruns | errors |", "| --- | --- | --- | --- | --- | --- |"]
    for side, name in (("plain", "plain"), ("ray", "Ray Serve ingress")):
        for level in r["serve"][side]:
            t = level["ttfa_ms"]
            lines.append(f"| {name} | {level['clients']} | {t['p50']:.0f} | {t['p95']:.0f} | {level['underruns']} | "
                         f"{len(level['errors'])} |")
    return "\n".join(lines) + "\n"
