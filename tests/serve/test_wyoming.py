"""The Wyoming door with the ``wyoming`` package's own client, as Home Assistant talks to it:
describe, synthesize, and streaming synthesis whose audio starts before the text has ended; the
audio equals offline synthesis with the server's seed."""

from __future__ import annotations

import asyncio
from contextlib import contextmanager

import numpy as np
import pytest

pytest.importorskip("wyoming")

from wyoming.audio import AudioChunk, AudioStart, AudioStop  # noqa: E402
from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.error import Error  # noqa: E402
from wyoming.info import Describe, Info  # noqa: E402
from wyoming.tts import (Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped,  # noqa: E402
                         SynthesizeVoice)

from voicespec.audio import to_int16  # noqa: E402
from voicespec.pipeline.synthesis import SynthesisStream, Synthesizer, collect  # noqa: E402
from voicespec.serve.config import ServerConfig  # noqa: E402
from voicespec.serve.requests import Asked, request_options  # noqa: E402
from voicespec.serve.server import server_thread  # noqa: E402

TEXT = "Hello there. Second one."


@contextmanager
def running(voice, **overrides):
    config = ServerConfig(**{"port": 0, "wyoming_port": 0, "max_steps": 24, "seed": 3, "ping_interval_s": None,
                             **overrides})
    with server_thread(config, voice) as server:
        yield server


async def audio_of(client: AsyncTcpClient, rate: int | None = None) -> tuple[np.ndarray, int, list[str]]:
    """Read one request's events up to audio-stop: its samples, rate (from audio-start, unless
    that was read already) and the event types seen."""
    seen, chunks = [], []
    while True:
        event = await asyncio.wait_for(client.read_event(), 30)
        seen.append(event.type)
        if AudioStart.is_type(event.type):
            rate = AudioStart.from_event(event).rate
        elif AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            assert (chunk.width, chunk.channels, chunk.rate) == (2, 1, rate)
            chunks.append(np.frombuffer(chunk.audio, "<i2"))
        elif AudioStop.is_type(event.type) or Error.is_type(event.type):
            return (np.concatenate(chunks) if chunks else np.zeros(0, np.int16)), rate, seen


def offline(server, voice, text: str) -> np.ndarray:
    options = request_options(voice, server.config, Asked())  # the server's seed, as a Wyoming request gets
    return to_int16(collect(Synthesizer(voice).stream(text, options)).pcm)


@pytest.mark.slow
def test_describe_synthesize_and_streaming_synthesize(tiny_voice):
    async def main(server):
        client = AsyncTcpClient("127.0.0.1", server.wyoming_port)
        await client.connect()
        try:
            await client.write_event(Describe().event())
            info = Info.from_event(await client.read_event())
            program = info.tts[0]
            assert program.supports_synthesize_streaming and [v.name for v in program.voices] == server.voices.names

            await client.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name=tiny_voice.name)).event())
            whole, rate, seen = await audio_of(client)
            assert seen[0] == "audio-start" and seen[-1] == "audio-stop" and rate == tiny_voice.codec.sample_rate
            assert np.array_equal(whole, offline(server, tiny_voice, TEXT))

            # streaming: the first sentence is heard before the text is complete
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeChunk(text="Hello there. Sec").event())
            first = await asyncio.wait_for(client.read_event(), 30)
            assert AudioStart.is_type(first.type)  # audio began while the text is still being written
            await client.write_event(SynthesizeChunk(text="ond one.").event())
            await client.write_event(Synthesize(text=TEXT).event())  # the whole text, for older servers: ignored here
            await client.write_event(SynthesizeStop().event())
            streamed, _, seen = await audio_of(client, rate)
            assert np.array_equal(streamed, whole)  # the same text, the same seed: the same audio
            assert SynthesizeStopped.is_type((await asyncio.wait_for(client.read_event(), 30)).type)

            await client.write_event(Synthesize(text=TEXT, voice=SynthesizeVoice(name="nobody")).event())
            error = await asyncio.wait_for(client.read_event(), 30)
            assert Error.is_type(error.type) and "unknown voice" in Error.from_event(error).text
            await client.write_event(Synthesize(text="...").event())  # nothing to speak: an error, nothing spoken
            error = await asyncio.wait_for(client.read_event(), 30)
            assert Error.is_type(error.type)
            await client.write_event(Synthesize(text="Still here.").event())  # the connection goes on
            after, _, _ = await audio_of(client)
            assert after.size
        finally:
            await client.disconnect()

    with running(tiny_voice) as server:
        asyncio.run(main(server))
        assert not server.wyoming.active


@pytest.mark.slow
def test_ssml_whole_and_streamed_is_spoken_as_offline(tiny_voice):
    doc = '<speak>Hello there. <break time="500ms"/> Second one.</speak>'

    async def main(server):
        client = AsyncTcpClient("127.0.0.1", server.wyoming_port)
        await client.connect()
        try:
            await client.write_event(Synthesize(text=doc, text_format="ssml").event())
            whole, _, _ = await audio_of(client)
            await client.write_event(SynthesizeStart(text_format="ssml").event())
            for piece in (doc[:20], doc[20:]):  # markup is gathered, and read whole at the stop
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(SynthesizeStop().event())
            streamed, _, _ = await audio_of(client)
            assert SynthesizeStopped.is_type((await asyncio.wait_for(client.read_event(), 30)).type)
            return whole, streamed
        finally:
            await client.disconnect()

    with running(tiny_voice) as server:
        whole, streamed = asyncio.run(main(server))
        options = request_options(tiny_voice, server.config, Asked())
    reference = to_int16(collect(SynthesisStream(tiny_voice, doc, options, tiny_voice.script(doc))).pcm)
    assert np.array_equal(whole, reference) and np.array_equal(streamed, reference)


@pytest.mark.slow
def test_a_request_past_the_waiting_limit_gets_an_error_and_is_counted(tiny_voice):
    """One decoding place and no waiting: a request that comes while another is spoken gets
    Wyoming's error event at once (``AtCapacity``) and counts under ``at_capacity``; the first
    goes on to its offline audio."""
    paragraph = "One sentence here. Another one there. A third one now. And the last."

    async def go(port):
        first, second = AsyncTcpClient("127.0.0.1", port), AsyncTcpClient("127.0.0.1", port)
        await first.connect()
        await second.connect()
        try:
            await first.write_event(Synthesize(text=paragraph).event())
            head = []
            while not AudioChunk.is_type((event := await asyncio.wait_for(first.read_event(), 30)).type):
                head.append(event)  # audio-start: the first request is under way
            await second.write_event(Synthesize(text=TEXT).event())
            refused = await asyncio.wait_for(second.read_event(), 30)
            rest, _, _ = await audio_of(first, AudioStart.from_event(head[-1]).rate)
            return np.concatenate([np.frombuffer(AudioChunk.from_event(event).audio, "<i2"), rest]), refused
        finally:
            await first.disconnect()
            await second.disconnect()

    with running(tiny_voice, max_decoding_contexts=1, max_waiting_contexts=0, pacing_lead_s=0.1) as server:
        pcm, refused = asyncio.run(go(server.wyoming_port))
        counted = server.metrics.registry.get_sample_value("voicespec_errors_total", {"code": "at_capacity"})
    assert Error.is_type(refused.type) and Error.from_event(refused).code == "AtCapacity"
    assert "in use: 1 of 1, waiting: 0" in Error.from_event(refused).text and counted == 1
    assert np.array_equal(pcm, offline(server, tiny_voice, paragraph))
