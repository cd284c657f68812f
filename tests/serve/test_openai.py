"""The OpenAI-compatible door, driven by the official ``openai`` SDK against a live server on
loopback: every response format equals offline synthesis with the same seed, streaming (chunked
and server-sent events) delivers audio as it is made, and bad requests get OpenAI's error shape."""

from __future__ import annotations

import asyncio
import base64
import io
import threading
import json
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import numpy as np
import pytest
import soundfile as sf
import torch

openai = pytest.importorskip("openai")
av = pytest.importorskip("av")
pytest.importorskip("aiohttp")

from voicespec.audio import to_int16  # noqa: E402
from voicespec.pipeline.synthesis import SynthesisStream, Synthesizer, collect  # noqa: E402
from voicespec.serve.config import ServerConfig  # noqa: E402
from voicespec.serve.encoders import make_encoder  # noqa: E402
from voicespec.serve.requests import Asked, request_options  # noqa: E402
from voicespec.serve.server import server_thread  # noqa: E402

MAX_STEPS = 24
TEXT = "Hello there. Second one."


@contextmanager
def running(voice, **overrides):
    config = ServerConfig(**{"port": 0, "openai_port": 0, "max_steps": MAX_STEPS, "ping_interval_s": None, **overrides})
    with server_thread(config, voice) as server:
        yield server


def client(server, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server.openai_port}/v1", api_key=key, max_retries=0)


def offline(server, voice, text: str, seed: int) -> torch.Tensor:
    """The float PCM offline synthesis gives for the request (24 kHz, as OpenAI's formats)."""
    options = request_options(voice, server.config, Asked(seed=seed, sample_rate=24000))
    return torch.from_numpy(collect(Synthesizer(voice).stream(text, options)).pcm)


def decoded(data: bytes) -> np.ndarray:
    """A compressed stream's samples as FFmpeg decodes it, as 16-bit integers."""
    with av.open(io.BytesIO(data)) as container:
        frames = [f.to_ndarray().reshape(-1) for f in container.decode(audio=0)]
    x = np.concatenate(frames)
    return x if x.dtype == np.int16 else to_int16(x)


@pytest.mark.slow
def test_every_response_format_is_offline_synthesis_with_the_same_seed(tiny_voice):
    with running(tiny_voice) as server:
        c = client(server)
        assert [m.id for m in c.models.list().data][:2] == ["voicespec", "tts-1"]
        pcm = offline(server, tiny_voice, TEXT, seed=5)
        ref = to_int16(pcm)
        assert ref.size > 0
        for fmt in ("wav", "pcm", "flac", "mp3", "aac", "opus"):
            data = c.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format=fmt,
                                         extra_body={"seed": 5}).content
            if fmt == "pcm":
                assert np.array_equal(np.frombuffer(data, "<i2"), ref), fmt
            elif fmt in ("wav", "flac"):
                y, rate = sf.read(io.BytesIO(data), dtype="int16")
                assert rate == 24000 and np.array_equal(y, ref), fmt
            else:  # lossy: the same samples through the same encoder decode to the same audio
                enc = make_encoder(fmt, 24000)
                expected = decoded(enc.encode(pcm) + enc.finish())
                got = decoded(data)
                assert got.shape == expected.shape and np.abs(got.astype(int) - expected).max() <= 1, fmt
        # our own voice name reaches the same voice
        named = c.audio.speech.create(model="voicespec", voice=tiny_voice.name, input=TEXT, response_format="pcm",
                                      extra_body={"seed": 5}).content
        assert named == ref.tobytes()
        sse = c.audio.speech.create(model="voicespec", voice="nova", input=TEXT, response_format="pcm", stream_format="sse",
                                    extra_body={"seed": 5, "gamma": 3, "drafter": "none", "coupling": "residual"})
        done = json.loads(sse.content.decode().strip().split("\n")[-1][len("data: "):])["voicespec"]
        assert (done["gamma"], done["drafter"], done["coupling"]) == (3, "none", "residual")  # extra_body reaches the engine


@pytest.mark.slow
def test_streamed_audio_arrives_as_it_is_made_and_sse_carries_the_same_bytes(tiny_voice):
    text = "One sentence here. " * 6
    with running(tiny_voice) as server:
        c = client(server)
        t0 = time.perf_counter()
        with c.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input=text,
                                                           response_format="pcm", extra_body={"seed": 2}) as resp:
            assert resp.headers["content-type"] == "audio/pcm"
            times, chunks = [], []
            for chunk in resp.iter_bytes():
                times.append(time.perf_counter() - t0)
                chunks.append(chunk)
        streamed = b"".join(chunks)
        assert len(chunks) > 3 and times[0] < 0.6 * times[-1]  # the first audio long before the last
        sse = c.audio.speech.create(model="tts-1", voice="alloy", input=text, response_format="pcm",
                                    stream_format="sse", extra_body={"seed": 2}).content.decode()
        events = [json.loads(line[len("data: "):]) for line in sse.split("\n") if line.startswith("data: ")]
        assert {e["type"] for e in events[:-1]} == {"speech.audio.delta"} and events[-1]["type"] == "speech.audio.done"
        assert b"".join(base64.b64decode(e["audio"]) for e in events[:-1]) == streamed
        done = events[-1]
        assert done["usage"]["input_tokens"] == len(text) and done["voicespec"]["sentences"] == 6


def _post(server, body, headers=None, path="/v1/audio/speech", method="POST"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{server.openai_port}{path}", data=data if method == "POST" else None,
                                 method=method, headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_bad_requests_get_openais_error_shape_and_nothing_is_spoken(tiny_voice):
    ok = {"model": "tts-1", "voice": "alloy", "input": "Hi."}
    cases = [
        (b"{not json", 400, None),
        ([1, 2], 400, None),
        ({**ok, "input": ""}, 400, "input"),
        ({**ok, "input": "x" * 4097}, 400, "input"),
        ({**ok, "voice": "nobody"}, 400, "voice"),
        ({"model": "tts-1", "input": "Hi."}, 400, "voice"),
        ({**ok, "response_format": "ogg"}, 400, "response_format"),
        ({**ok, "speed": 9}, 400, "speed"),
        ({**ok, "speed": "fast"}, 400, "speed"),
        ({**ok, "seed": -1}, 400, "seed"),
        ({**ok, "gamma": "lots"}, 400, "gamma"),
        ({**ok, "drafter": "oracle"}, 400, "drafter"),
        ({**ok, "temperature": "hot"}, 400, None),
        ({**ok, "stream_format": "chunks"}, 400, "stream_format"),
        ({**ok, "input": "..."}, 400, "input"),  # nothing speakable
    ]
    with running(tiny_voice, api_key="sesame") as server:
        auth = {"Authorization": "Bearer sesame"}
        for body, status, param in cases:
            got, raw = _post(server, body, auth)
            error = json.loads(raw)["error"]
            assert got == status and error["param"] == param and error["message"], (body, raw)
        assert _post(server, ok)[0] == 401  # no key
        assert json.loads(_post(server, ok, {"Authorization": "Bearer wrong"})[1])["error"]["code"] == "invalid_api_key"
        assert _post(server, ok, auth, path="/v1/audio/speech", method="GET")[0] == 405
        assert _post(server, ok, auth, path="/v1/nothing")[0] == 404
        status, raw = _post(server, {**ok, "instructions": "Speak like a pirate.", "future_field": 1}, auth)
        assert status == 200 and raw[:3] == b"ID3"  # accepted and ignored; mp3, the default format
        with pytest.raises(openai.AuthenticationError):
            client(server, "wrong").audio.speech.create(model="tts-1", voice="alloy", input="Hi.")
        assert client(server, "sesame").audio.speech.create(model="tts-1", voice="alloy", input="Hi.",
                                                            response_format="pcm").content


def test_every_door_counts_against_max_sessions_and_a_hang_up_frees_the_slot(tiny_voice):
    async def hold_a_websocket(server, holding, release):
        from websockets.asyncio.client import connect

        async with connect(f"ws://127.0.0.1:{server.port}/v1/stream"):
            holding.set()
            await asyncio.get_running_loop().run_in_executor(None, release.wait)

    with running(tiny_voice, max_sessions=1) as server:
        c = client(server)
        holding, release = threading.Event(), threading.Event()
        socket_thread = threading.Thread(target=lambda: asyncio.run(hold_a_websocket(server, holding, release)))
        socket_thread.start()
        try:
            assert holding.wait(20)
            with pytest.raises(openai.RateLimitError, match="at capacity"):  # the WebSocket holds the one slot
                c.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", response_format="pcm")
        finally:
            release.set()
            socket_thread.join(20)
        deadline = time.monotonic() + 10
        while server.sessions and time.monotonic() < deadline:
            time.sleep(0.05)
        with c.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input="Again and again. " * 20,
                                                           response_format="pcm") as resp:
            next(resp.iter_bytes())  # then hang up, mid-stream
        deadline = time.monotonic() + 10
        while server.openai.active and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not server.openai.active
        assert c.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", response_format="pcm").content


@pytest.mark.slow
def test_past_the_waiting_limit_a_request_is_refused_with_429_and_served_once_a_place_frees(tiny_voice):
    """One decoding place and no waiting: while a request's context is under way, the next is
    refused at once (HTTP 429, so the caller can go elsewhere), and
    served once the first has hung up."""
    # paced: the first request's text takes seconds to speak, however fast its bytes drain into the socket
    with running(tiny_voice, max_decoding_contexts=1, max_waiting_contexts=0, pacing_lead_s=0.1) as server:
        c = client(server)
        with c.audio.speech.with_streaming_response.create(model="tts-1", voice="alloy", input="Again and again. " * 20,
                                                           response_format="pcm") as resp:
            next(resp.iter_bytes())
            with pytest.raises(openai.RateLimitError, match="decoding places in use: 1 of 1, waiting: 0"):
                c.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", response_format="pcm")
        deadline = time.monotonic() + 10
        while server.worker.free != 1 and time.monotonic() < deadline:  # the hang-up gives the place back
            time.sleep(0.05)
        assert c.audio.speech.create(model="tts-1", voice="alloy", input="Hi.", response_format="pcm").content


@pytest.mark.slow
def test_ssml_input_is_spoken_as_offline_and_malformed_markup_speaks_nothing(tiny_voice):
    doc = '<speak>Hello there. <break time="500ms"/> Second one.</speak>'
    with running(tiny_voice) as server:
        data = client(server).audio.speech.create(model="tts-1", voice="alloy", input=doc, response_format="pcm",
                                                  extra_body={"seed": 5}).content
        options = request_options(tiny_voice, server.config, Asked(seed=5, sample_rate=24000))
        ref = to_int16(collect(SynthesisStream(tiny_voice, doc, options, tiny_voice.script(doc))).pcm)
        assert np.array_equal(np.frombuffer(data, "<i2"), ref) and ref.size > 0.5 * 24000
        status, raw = _post(server, {"model": "tts-1", "voice": "alloy", "input": "<speak>Hello <b>there</speak>"})
        error = json.loads(raw)["error"]
        assert status == 400 and error["param"] == "input" and "malformed SSML at line 1" in error["message"]
