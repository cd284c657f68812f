"""``voicespec serve --ray`` on a local Ray with 2 CPUs: the plain server's protocol round trip
through the Serve ingress (audio equal to offline synthesis sample for sample), aggregated
/healthz and /metrics, and a replica killed mid-stream ending only its own sessions."""

from __future__ import annotations

import asyncio
import json
import socket
import time
import urllib.request

import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")

from voicespec.audio import to_encoding  # noqa: E402
from voicespec.engine.config import DecodeConfig  # noqa: E402
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer  # noqa: E402
from voicespec.serve.client import TTSClient  # noqa: E402
from voicespec.serve.config import ServerConfig  # noqa: E402

# One Ray cluster at a time: under pytest-xdist both modules run on one worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

MAX_STEPS = 24
# Seconds for a socket to open through the ingress: beside another pytest-xdist worker the first one
# took longer than websockets' default 10 s (a CI run of 2026-12-07).
OPEN_S = 60
TEXT = "Hello there. Second one."
START = {"sample_rate": 16000, "seed": 11, "gamma": 2, "drafter": "draft-model", "temperature": 0.9, "top_k": 30}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster(tiny_voice_dir):
    from voicespec.cluster.serve import RayServeConfig, build_app

    port = free_port()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    config = ServerConfig(voice=str(tiny_voice_dir), max_steps=MAX_STEPS, ping_interval_s=None, frame_cache_mb=0)
    serve.run(build_app(config, RayServeConfig(replicas=2, min_replicas=2, max_replicas=2, replica_cpus=0.5)),
              name="voicespec", route_prefix="/")
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # both replicas up and answering through the ingress
    while True:
        try:
            if len(json.loads(get(address, "/healthz")[1])["replicas"]) == 2:
                break
        except (OSError, ValueError, KeyError):
            pass
        assert time.monotonic() < deadline, "the Serve app did not come up"
        time.sleep(0.5)
    yield address
    serve.shutdown()
    ray.shutdown()


def offline(voice, text: str) -> bytes:
    from dataclasses import replace as r

    sampling = r(voice.sampling, temperature=START["temperature"], top_k=START["top_k"])
    decode = DecodeConfig(sampling, gamma=START["gamma"], max_steps=MAX_STEPS, seed=START["seed"])
    pcm, _ = Synthesizer(voice).synthesize(text, SynthesisOptions(decode, drafter=START["drafter"], sample_rate=16000))
    return to_encoding(pcm, "pcm_s16le")


def get(cluster: str, path: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(f"http://{cluster}{path}", timeout=10) as r:
        return r.status, r.read()


def test_round_trip_through_the_ingress_equals_offline_synthesis(cluster, tiny_voice):
    async def go():
        async with TTSClient(f"ws://{cluster}/v1/stream", open_timeout=OPEN_S) as client:
            ready = await client.start(**START)
            return ready, await client.synthesize(TEXT)

    ready, result = asyncio.run(asyncio.wait_for(go(), 120))
    assert ready["voice"] == tiny_voice.name and ready["protocol_version"] == "1.1"
    assert result.payload == offline(tiny_voice, TEXT) and result.stats["finish_reason"]
    status, body = get(cluster, "/healthz")
    health = json.loads(body)
    assert status == 200 and health["ok"] and len(health["replicas"]) == 2
    metrics = get(cluster, "/metrics")[1].decode()
    assert metrics.count('voicespec_sessions_total{replica="') == 2  # one series per replica
    assert get(cluster, "/")[0] == 200 and b"player.js" in get(cluster, "/")[1]


def test_a_killed_replica_ends_only_its_own_sessions(cluster, tiny_voice):
    long_text = " ".join(["Hello there, this is a longer sentence."] * 4)

    async def session(name: str, started: asyncio.Event):
        async with TTSClient(f"ws://{cluster}/v1/stream", open_timeout=OPEN_S) as client:
            await client.start(**START, pacing_lead_ms=50)
            chunks = []
            try:
                async for item in client.stream(long_text, context_id=name):
                    if not isinstance(item, dict):
                        chunks.append(item.payload)
                        started.set()
                    elif item["type"] == "error":
                        return "error", item
                return "done", b"".join(chunks)
            except ConnectionError:
                return "lost", client.fatal

    def per_replica() -> list[int]:
        return sorted(r["sessions"] for r in json.loads(get(cluster, "/healthz")[1])["replicas"].values())

    async def go():
        a_started = asyncio.Event()
        a = asyncio.ensure_future(session("a", a_started))
        await asyncio.wait_for(a_started.wait(), 60)
        # Serve routes by its replicas' queue lengths as it last heard them: on a busy machine it
        # can send b to a's replica too. Then b goes, and comes again until it lands on the other.
        for _ in range(8):
            b_started = asyncio.Event()
            b = asyncio.ensure_future(session("b", b_started))
            await asyncio.wait_for(b_started.wait(), 60)
            if per_replica() == [1, 1]:
                break
            b.cancel()
            await asyncio.gather(b, return_exceptions=True)
            for _ in range(200):
                if per_replica() == [0, 1]:
                    break
                await asyncio.sleep(0.05)
        assert per_replica() == [1, 1]  # a and b on different replicas
        victim = next(n for n in ray.util.list_named_actors(all_namespaces=True)
                      if "VoiceReplica" in n["name"])
        ray.kill(ray.get_actor(victim["name"], namespace=victim["namespace"]), no_restart=False)
        return await asyncio.gather(a, b)

    outcomes = asyncio.run(asyncio.wait_for(go(), 180))
    kinds = sorted(o[0] for o in outcomes)
    assert kinds == ["done", "lost"], outcomes
    lost = next(o[1] for o in outcomes if o[0] == "lost")
    assert lost["code"] == "replica_lost" and lost["fatal"]
    finished = next(o[1] for o in outcomes if o[0] == "done")
    assert finished == offline(tiny_voice, long_text)
