"""``voicespec stress``: the server against hostile clients on loopback, as one table.

Phases, each beside one well-behaved session whose audio must stay what it was on a quiet
server, byte for byte (whoever shares its batched model and codec calls), and a probe that opens a new
session every 0.2 s and times its first audio (p50 and p95 over every sample): a fuzz flood
(generated hostile messages, :mod:`.hostile`, from sockets that reconnect whenever the server
closes them), a storm of mid-stream disconnects (resets and close frames), two floods within
every per-connection budget (a CPU flood: digit runs that once cost seconds of front-end work
each; a contexts flood: many sockets with eight long contexts each), and a soak of a few
sessions. Each load runs in a process of its own (:mod:`.stress_loads`), as an attacker would.
It counts what matters for hardening: tracebacks logged, closes without an error frame, server
errors by code, cache rows, contexts and file descriptors left behind, memory growth, and how
long ``/healthz`` takes to answer meanwhile (p99)."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from voicespec.bench import STRESS_PHASES as PHASES
from voicespec.bench.stress_loads import Closes, load_in_process
from voicespec.bench.machine import open_fds, rss_mb
from voicespec.pipeline.voice import Voice
from voicespec.serve import protocol as P
from voicespec.serve.client import Audio, TTSClient
from voicespec.serve.config import ServerConfig
from voicespec.serve.server import TTSServer, server_thread

GOOD_TEXT = "Hello there. This session behaves well."
DOCUMENTED_CLOSES = {1000, P.CLOSE_TOO_BIG, P.CLOSE_SLOW_CLIENT, P.CLOSE_INACTIVE, P.CLOSE_RATE_LIMITED, P.CLOSE_TRY_LATER}


@dataclass(frozen=True)
class StressConfig:
    messages: int = 100_000  # hostile messages in the fuzz phase, all sockets together
    sockets: int = 8  # hostile sockets at a time
    disconnects: int = 1000
    soak_s: float = 0.0  # 0: no soak phase
    soak_sessions: int = 4
    flood_s: float = 20.0  # each flood phase's length (0: no flood phases)
    flood_sockets: int = 12  # the contexts flood's sockets (the CPU flood uses one, as the probe did)
    seed: int = 0
    flood_contexts: int = ServerConfig().max_contexts_per_session  # contexts per socket in the contexts flood
    phases: tuple[str, ...] = PHASES  # the phases to run (soak also needs soak_s, the floods flood_s)

    def __post_init__(self) -> None:
        unknown = set(self.phases) - set(PHASES)
        if unknown or not self.phases:
            raise ValueError(f"phases must be some of {', '.join(PHASES)}, got {', '.join(self.phases) or 'none'}")


class _Tracebacks(logging.Handler):
    """Counts error records that carry a traceback (the server logs every unexpected exception)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.exc_info is not None


@dataclass
class StressReport:
    config: dict[str, Any]
    quiet_ttfa_ms: float = 0.0
    phases: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> str:
        rows = ["| phase | what | tracebacks | closes without error frame | good session's audio | new session's TTFA "
                f"ms p50 / p95 (quiet {self.quiet_ttfa_ms:.0f}) | /healthz p99 ms | rows / contexts / fds left | RSS MB before → after |",
                "|---|---|---|---|---|---|---|---|---|"]
        for p in self.phases:
            audio = "identical" if p["identical"] else f"within {p['max_lsb']:.0f} LSB"
            rows.append(f"| {p['phase']} | {p['what']} | {p['tracebacks']} | {p['bad_closes']} | {audio} | "
                        f"{p['good_ttfa_ms']:.0f} / {p['good_ttfa_p95_ms']:.0f} | {p['healthz_p99_ms']:.0f} | "
                        f"{p['rows_left']} / {p['contexts_left']} / {p['fds_left']:+d} | "
                        f"{p['rss_before']:.0f} → {p['rss_after']:.0f} |")
        return "\n".join(rows)


def _lsb(a: bytes, b: bytes) -> float:
    """Largest difference between two pcm_s16le streams, in 16-bit steps (inf: lengths differ)."""
    x, y = np.frombuffer(a, "<i2").astype(np.int32), np.frombuffer(b, "<i2").astype(np.int32)
    return float(np.abs(x - y).max(initial=0)) if x.shape == y.shape else float("inf")


async def _good(url: str) -> tuple[float, bytes]:
    async with TTSClient(url) as c:
        await c.start(seed=1, gamma=0)
        r = await c.synthesize(GOOD_TEXT)
    return 1000 * r.ttfa_s, r.payload


async def _ttfa_probe(url: str) -> float:
    """A new session's time to first audio (ms): connect, start, one sentence; cancelled at its
    first chunk, so the probe can run often without adding load of its own."""
    async with TTSClient(url) as c:
        await c.start(seed=1, gamma=0)
        t = time.perf_counter()
        async for item in c.stream(GOOD_TEXT):
            if isinstance(item, Audio):
                await c.send("cancel", context_id=item.context_id)
                return 1000 * (time.perf_counter() - t)
    return float("nan")


async def _healthz_ms(port: int) -> float:
    t = time.perf_counter()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    await reader.read()
    writer.close()
    return 1000 * (time.perf_counter() - t)


def run_stress(voice: Voice, config: StressConfig) -> StressReport:
    counter = _Tracebacks()
    for name in ("voicespec", "websockets"):
        logging.getLogger(name).addHandler(counter)
    report = StressReport(config=asdict(config))
    pool = getattr(voice.target, "stack", None)
    with server_thread(ServerConfig(port=0, max_sessions=max(128, config.sockets + 8), ping_interval_s=None),
                       voice) as tts:
        try:
            _phases(report, tts, f"ws://127.0.0.1:{tts.port}{P.WS_PATH}", pool, counter, config)
        finally:
            for name in ("voicespec", "websockets"):
                logging.getLogger(name).removeHandler(counter)
    return report


def _phases(report: StressReport, tts: TTSServer, url: str, pool: Any, counter: _Tracebacks,
            config: StressConfig) -> None:
    """Every phase in turn, into ``report``."""
    quiet = [asyncio.run(_good(url)) for _ in range(3)]
    report.quiet_ttfa_ms = float(np.median([asyncio.run(_ttfa_probe(url)) for _ in range(5)] + [t for t, _ in quiet]))
    reference = quiet[0][1]
    fields = asdict(config)

    def phase(name: str, what: str) -> None:
        before_tb, fds, rss = counter.count, open_fds(), rss_mb()
        runs: list[tuple[float, bytes]] = []
        ttfa: list[float] = []
        healthz: list[float] = []

        async def beside_load() -> Closes:
            stop = asyncio.Event()

            async def good() -> None:
                while not stop.is_set():
                    runs.append(await _good(url))
                    ttfa.append(runs[-1][0])

            async def first_audio() -> None:
                while not stop.is_set():
                    ttfa.append(await _ttfa_probe(url))
                    await asyncio.sleep(0.2)

            async def health() -> None:
                while not stop.is_set():
                    healthz.append(await _healthz_ms(tts.port))
                    await asyncio.sleep(0.05)

            tasks = [asyncio.create_task(f()) for f in (good, first_audio, health)]
            try:
                return await load_in_process(name, url, tts.port, fields)
            finally:
                stop.set()
                await asyncio.gather(*tasks)

        closes = asyncio.run(beside_load())
        t = time.monotonic()
        while time.monotonic() - t < 30 and (tts.worker._jobs or tts.sessions):
            time.sleep(0.05)
        report.phases.append({
            "phase": name, "what": what, "tracebacks": counter.count - before_tb,
            "bad_closes": sum(1 for code, had_error in closes if code not in DOCUMENTED_CLOSES and not
                              (code == P.CLOSE_INTERNAL and had_error)),
            "closes": {str(c): sum(1 for code, _ in closes if code == c) for c in sorted({c for c, _ in closes if c is not None})},
            "identical": all(p == reference for _, p in runs), "max_lsb": max((_lsb(p, reference) for _, p in runs), default=0),
            "good_runs": len(runs), "ttfa_samples": len(ttfa),
            "good_ttfa_ms": float(np.median(ttfa)) if ttfa else float("nan"),
            "good_ttfa_p95_ms": float(np.percentile(ttfa, 95)) if ttfa else float("nan"),
            "healthz_p99_ms": float(np.percentile(healthz, 99)) if healthz else float("nan"),
            "rows_left": pool.pool.in_use if pool is not None else 0,
            "contexts_left": len(tts.worker._jobs), "fds_left": open_fds() - fds,
            "rss_before": rss, "rss_after": rss_mb()})

    what = {"fuzz": f"{config.messages:,} generated hostile messages from {config.sockets} sockets",
            "disconnects": f"{config.disconnects:,} mid-stream drops (resets, close frames)",
            "cpu": f"a 4,300-digit text every 0.25 s from one socket for {config.flood_s:g} s",
            "contexts": f"{config.flood_sockets} sockets x {config.flood_contexts} long contexts for {config.flood_s:g} s",
            "soak": f"{config.soak_sessions} sessions for {config.soak_s:g} s"}
    for name in PHASES:
        if name in config.phases and (config.flood_s if name in ("cpu", "contexts") else
                                      config.soak_s if name == "soak" else True):
            phase(name, what[name])
