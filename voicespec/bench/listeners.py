"""The listeners of the load test: N concurrent WebSocket clients, each speaking one prompt and
judging its stream with the real-time player. Light on purpose (no torch): they run in a process
of their own, as real clients would, so their work does not share the server's cores' time with
its decode thread (one Python process shares one interpreter lock)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from voicespec.bench.dist import percentiles
from voicespec.serve.client import TTSClient


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


async def _client(url: str, drafter: str, gamma: int | str, text: str, seed: int,
                  prebuffer_s: float) -> tuple[float | None, dict[str, Any], float | None]:
    """One listener: TTFA, the playout verdict, and the server's RTF for the context."""
    async with TTSClient(url) as client:
        await client.start(drafter=drafter, gamma=gamma, seed=seed)
        result = await client.synthesize(text)
    return result.ttfa_s, result.playout(prebuffer_s), (result.stats or {}).get("rtf")


async def _level(url: str, method: str, drafter: str, gamma: int | str, texts: Sequence[str], n: int,
                 prebuffer_s: float, seed: int) -> LoadLevel:
    outcomes = await asyncio.gather(*(_client(url, drafter, gamma, texts[i % len(texts)], seed + i, prebuffer_s)
                                      for i in range(n)), return_exceptions=True)
    ok = [o for o in outcomes if not isinstance(o, BaseException)]
    plays = [p for _, p, _ in ok]
    leads = [p["min_lead_s"] for p in plays if p["min_lead_s"] is not None]
    return LoadLevel(
        method=method, clients=n,
        ttfa_ms={k: None if v is None else 1000 * v for k, v in percentiles([t for t, _, _ in ok if t is not None]).items()},
        underruns=sum(p["underruns"] for p in plays), clients_with_underruns=sum(p["underruns"] > 0 for p in plays),
        stall_ms=1000 * sum(p["stall_s"] for p in plays), worst_lead_ms=1000 * min(leads) if leads else None,
        server_rtf=percentiles([r for _, _, r in ok if r is not None]),
        errors=[f"{type(o).__name__}: {o}" for o in outcomes if isinstance(o, BaseException)],
    )


async def listen(url: str, method: str, drafter: str, gamma: int | str, texts: Sequence[str], n: int,
                 prebuffer_s: float, seed: int) -> LoadLevel:
    """One load level: ``n`` listeners at once, in a process of their own (``python -m`` this module)."""
    args = dict(url=url, method=method, drafter=drafter, gamma=gamma, texts=list(texts), n=n,
                prebuffer_s=prebuffer_s, seed=seed)
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", __name__, json.dumps(args),
                                                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"the listener process failed: {err.decode(errors='replace').strip()[-2000:]}")
    return LoadLevel(**json.loads(out))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_level(**json.loads(sys.argv[1]))).to_dict()))
