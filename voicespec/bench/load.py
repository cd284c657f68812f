"""The real WebSocket server under N concurrent clients: each client opens a session with a
method's drafter and γ, speaks one prompt, and judges the stream with the same real-time player
as :mod:`.streaming`. The server runs here; the clients in a process of their own
(:mod:`.listeners`), as remote clients would. One decode thread batches every session, so TTFA
and underruns as N grows show how many listeners the machine carries."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from voicespec.bench.listeners import LoadLevel, listen
from voicespec.serve.config import ServerConfig
from voicespec.serve.protocol import WS_PATH
from voicespec.serve.server import TTSServer
from voicespec.pipeline.voice import Voice
from voicespec.bench.streaming import StreamSpec



async def _load(voice: Voice, specs: Sequence[StreamSpec], texts: Sequence[str], levels: Sequence[int],
                prebuffer_s: float, max_steps: int, seed: int) -> list[LoadLevel]:
    config = ServerConfig(port=0, max_sessions=max(levels), max_steps=max_steps, ping_interval_s=None)
    out = []
    async with TTSServer(config, voice) as server:
        url = f"ws://127.0.0.1:{server.port}{WS_PATH}"
        for spec in specs:
            for n in levels:
                out.append(await listen(url, spec.name, spec.drafter, spec.gamma, texts, n, prebuffer_s, seed))
    return out


def run_load(voice: Voice, specs: Sequence[StreamSpec], texts: Sequence[str], levels: Sequence[int],
             prebuffer_s: float, max_steps: int, seed: int = 0) -> list[LoadLevel]:
    """Each spec at each client count, in order, on one in-process server bound to a free port."""
    return asyncio.run(_load(voice, specs, texts, levels, prebuffer_s, max_steps, seed))
