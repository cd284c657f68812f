"""The real WebSocket server under N concurrent clients: each client opens a session with a
method's drafter and γ, speaks one prompt, and judges the stream with the same real-time player
as :mod:`.streaming`. The server runs here; the clients in a process of their own
(:mod:`.listeners`), as remote clients would. One decode thread batches every session, so TTFA
and underruns as N grows show how many listeners the machine carries."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np

from voicespec.bench.listeners import LoadLevel, listen
from voicespec.pipeline.frame_cache import FrameCache
from voicespec.serve.client import TTSClient
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


async def _cache_hit(voice: Voice, text: str, max_steps: int, seed: int, repeats: int) -> dict[str, Any]:
    config = ServerConfig(port=0, max_steps=max_steps, ping_interval_s=None)
    own, voice.frame_cache = voice.frame_cache, FrameCache(int(config.frame_cache_mb * 2**20))
    misses, hits, identical = [], [], True
    try:
        async with TTSServer(config, voice) as server:
            for r in range(repeats):  # a seed of its own each round: its sentences miss, then hit
                async with TTSClient(f"ws://127.0.0.1:{server.port}{WS_PATH}") as client:
                    await client.start(gamma=0, seed=seed + 1000 * r)
                    miss, hit = await client.synthesize(text), await client.synthesize(text)
                misses.append(miss.ttfa_s)
                hits.append(hit.ttfa_s)
                identical &= bool(np.array_equal(miss.pcm, hit.pcm))
        counts = voice.frame_cache.counts
    finally:
        voice.frame_cache = own
    return {"miss_ttfa_ms": 1000 * float(np.median(misses)), "hit_ttfa_ms": 1000 * float(np.median(hits)),
            "repeats": repeats, "cache_hits": counts.hits, "cache_misses": counts.misses, "hit_equals_miss": identical}


def run_cache_hit(voice: Voice, text: str, max_steps: int, seed: int = 0, repeats: int = 3) -> dict[str, Any]:
    """TTFA of a text decoded (frame-cache misses) and of the same text again (hits, replayed from
    the frame cache), median over ``repeats`` seeds, on a server with the default cache; and
    whether each hit's audio equals its miss sample for sample."""
    return asyncio.run(_cache_hit(voice, text, max_steps, seed, repeats))


def run_load(voice: Voice, specs: Sequence[StreamSpec], texts: Sequence[str], levels: Sequence[int],
             prebuffer_s: float, max_steps: int, seed: int = 0) -> list[LoadLevel]:
    """Each spec at each client count, in order, on one in-process server bound to a free port."""
    return asyncio.run(_load(voice, specs, texts, levels, prebuffer_s, max_steps, seed))
