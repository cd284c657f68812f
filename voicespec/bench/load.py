"""The real WebSocket server under N concurrent clients: each client opens a session with a
method's drafter and γ, speaks one prompt, and judges the stream with the same real-time player
as :mod:`.streaming`. One decode thread serves every session, so TTFA and underruns as N grows
show how many listeners the machine carries."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from voicespec.serve.client import TTSClient
from voicespec.serve.config import ServerConfig
from voicespec.serve.protocol import WS_PATH
from voicespec.serve.server import TTSServer
from voicespec.pipeline.voice import Voice
from voicespec.bench.dist import percentiles
from voicespec.bench.streaming import StreamSpec


@dataclass
class LoadLevel:
    method: str
    clients: int
    ttfa_ms: dict[str, float | None]
    underruns: int
    clients_with_underruns: int
    stall_ms: float
    worst_lead_ms: float | None
    server_rtf: dict[str, float | None]  # decode-thread seconds per audio second, per context
    errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


async def _client(url: str, spec: StreamSpec, text: str, seed: int,
                  prebuffer_s: float) -> tuple[float | None, dict[str, Any], float | None]:
    """One listener: TTFA, the playout verdict, and the server's RTF for the context."""
    async with TTSClient(url) as client:
        await client.start(drafter=spec.drafter, gamma=spec.gamma, seed=seed)
        result = await client.synthesize(text)
    return result.ttfa_s, result.playout(prebuffer_s), (result.stats or {}).get("rtf")


async def _level(url: str, spec: StreamSpec, texts: Sequence[str], n: int, prebuffer_s: float, seed: int) -> LoadLevel:
    outcomes = await asyncio.gather(*(_client(url, spec, texts[i % len(texts)], seed + i, prebuffer_s) for i in range(n)),
                                    return_exceptions=True)
    ok = [o for o in outcomes if not isinstance(o, BaseException)]
    plays = [p for _, p, _ in ok]
    leads = [p["min_lead_s"] for p in plays if p["min_lead_s"] is not None]
    return LoadLevel(
        method=spec.name, clients=n,
        ttfa_ms={k: None if v is None else 1000 * v for k, v in percentiles([t for t, _, _ in ok if t is not None]).items()},
        underruns=sum(p["underruns"] for p in plays), clients_with_underruns=sum(p["underruns"] > 0 for p in plays),
        stall_ms=1000 * sum(p["stall_s"] for p in plays), worst_lead_ms=1000 * min(leads) if leads else None,
        server_rtf=percentiles([r for _, _, r in ok if r is not None]),
        errors=[f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, BaseException)],
    )


async def _load(voice: Voice, specs: Sequence[StreamSpec], texts: Sequence[str], levels: Sequence[int],
                prebuffer_s: float, max_steps: int, seed: int) -> list[LoadLevel]:
    config = ServerConfig(port=0, max_sessions=max(levels), max_steps=max_steps, ping_interval_s=None)
    out = []
    async with TTSServer(config, voice) as server:
        url = f"ws://127.0.0.1:{server.port}{WS_PATH}"
        for spec in specs:
            for n in levels:
                out.append(await _level(url, spec, texts, n, prebuffer_s, seed))
    return out


def run_load(voice: Voice, specs: Sequence[StreamSpec], texts: Sequence[str], levels: Sequence[int],
             prebuffer_s: float, max_steps: int, seed: int = 0) -> list[LoadLevel]:
    """Each spec at each client count, in order, on one in-process server bound to a free port."""
    return asyncio.run(_load(voice, specs, texts, levels, prebuffer_s, max_steps, seed))
