"""First audio through the WebSocket protocol vs the OpenAI door, same server, same text, same
seed, interleaved: the OpenAI streaming path should add no more than 20 ms (issue 38).

    python scripts/door_ttfa.py [--runs 10]

Prints each door's median time to first audio byte (client side, from the request's send) and
the difference; the machine and torch's thread count with them."""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import time

import openai
import torch

from voicespec.serve.client import Audio, TTSClient
from voicespec.serve.config import ServerConfig
from voicespec.serve.server import server_thread

TEXT = "Good morning. The train to the city leaves at seven from platform four."


async def ws_first_audio(url: str, seed: int) -> float:
    async with TTSClient(url) as c:
        await c.start(sample_rate=24000, seed=seed)
        t0 = time.perf_counter()
        async for item in c.stream(TEXT):
            if isinstance(item, Audio):
                return time.perf_counter() - t0
    raise RuntimeError("no audio")


def openai_first_audio(client: openai.OpenAI, seed: int) -> float:
    t0 = time.perf_counter()
    with client.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=TEXT,
                                                            response_format="pcm", extra_body={"seed": seed}) as r:
        chunks = r.iter_bytes()
        first = None
        for chunk in chunks:
            if chunk and first is None:
                first = time.perf_counter() - t0
    return first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    with server_thread(ServerConfig(port=0, openai_port=0, frame_cache_mb=0)) as server:  # no replays: every run decodes
        url = f"ws://127.0.0.1:{server.port}/v1/stream"
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.openai_port}/v1", api_key="x", max_retries=0)
        asyncio.run(ws_first_audio(url, 0)), openai_first_audio(client, 0)  # warm both paths
        ws, oa = [], []
        for i in range(args.runs):  # interleaved, alternating which goes first
            for door in ((0, 1) if i % 2 == 0 else (1, 0)):
                if door == 0:
                    ws.append(asyncio.run(ws_first_audio(url, i)))
                else:
                    oa.append(openai_first_audio(client, i))
    w, o = statistics.median(ws) * 1000, statistics.median(oa) * 1000
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
          f"{torch.get_num_threads()}; {args.runs} runs each, interleaved")
    print(f"WebSocket first audio: median {w:.1f} ms (min {min(ws) * 1000:.1f}, max {max(ws) * 1000:.1f})")
    print(f"OpenAI first audio:    median {o:.1f} ms (min {min(oa) * 1000:.1f}, max {max(oa) * 1000:.1f})")
    print(f"OpenAI - WebSocket:    {o - w:+.1f} ms")


if __name__ == "__main__":
    main()
