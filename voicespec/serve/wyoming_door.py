"""The Wyoming door (Home Assistant's protocol, the ``wyoming`` package): ``describe`` → ``info``
with the voices; ``synthesize`` → ``audio-start`` / ``audio-chunk`` … / ``audio-stop``; and
streaming (``synthesize-start``, ``synthesize-chunk`` …, ``synthesize-stop`` → the audio, then
``synthesize-stopped``), whose first sentence is spoken while the rest is still being written.

A TCP server of its own port in the server's process and event loop: the same voices, decode
worker, limits and metrics as the other doors. Each request is one
:class:`~voicespec.serve.utterance.Utterance`; audio is 16-bit mono PCM at the voice's rate.
"""

from __future__ import annotations

import asyncio
import logging
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped, SynthesizeVoice

from voicespec import __version__
from voicespec.audio import to_int16
from voicespec.frontend.ssml import is_ssml
from voicespec.frontend.text import TextError
from voicespec.serve.door import AtCapacity, Door, UnknownVoice
from voicespec.serve.requests import Asked, request_options
from voicespec.serve.utterance import SynthesisFailed, Utterance
from voicespec.serve.voices import VoiceLoadError

log = logging.getLogger("voicespec.server")

ATTRIBUTION = Attribution(name="voicespec", url="https://github.com/voicespec/voicespec")
LANGUAGES = ["en_US"]


class WyomingHandler(AsyncEventHandler):
    """One Wyoming connection: any number of requests, one at a time (as Home Assistant sends them)."""

    def __init__(self, door: WyomingDoor, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        super().__init__(reader, writer)
        self.door = door
        self.streaming: Utterance | None = None  # between synthesize-start and synthesize-stop
        self.speaking: asyncio.Task | None = None  # the streamed request's audio, going out as it is made
        self.markup: str | None = None  # a streamed SSML document, gathered until synthesize-stop

    async def handle_event(self, event: Event) -> bool:
        try:
            if Describe.is_type(event.type):
                await self.write_event(self.door.info().event())
            elif SynthesizeStart.is_type(event.type):
                start = SynthesizeStart.from_event(event)
                self.markup = "" if _is_ssml_format(start.text_format) else None  # SSML is read whole, at the stop
                self.streaming = await self.door.utterance(start.voice)
                self.speaking = asyncio.create_task(self._speak(self.streaming))
            elif SynthesizeChunk.is_type(event.type) and self.streaming is not None:
                text = SynthesizeChunk.from_event(event).text
                if self.markup is None:
                    await self.streaming.add(text)
                else:
                    self.markup += text
            elif SynthesizeStop.is_type(event.type) and self.streaming is not None:
                utterance, task, self.streaming, self.speaking = self.streaming, self.speaking, None, None
                if self.markup is not None:
                    await utterance.add_markup(self.markup, ssml=True)
                await utterance.end()
                await task
                await self.write_event(SynthesizeStopped().event())
            elif Synthesize.is_type(event.type) and self.streaming is None and self.speaking is None:
                # (a streaming client also sends the whole text as `synthesize`, for older servers: ignored)
                request = Synthesize.from_event(event)
                utterance = await self.door.utterance(request.voice)
                if _is_ssml_format(request.text_format) or is_ssml(request.text):
                    await utterance.add_markup(request.text, ssml=True)
                else:
                    await utterance.add(request.text)
                await utterance.end()
                await self._speak(utterance)
        except (ValueError, TextError, UnknownVoice, VoiceLoadError, AtCapacity, SynthesisFailed) as e:
            if isinstance(e, AtCapacity):  # refused at admission, or turned away while it waited
                self.door.metrics.error("at_capacity")
            await self._abandon()
            await self.write_event(Error(text=str(e), code=type(e).__name__).event())
        return True

    async def _speak(self, utterance: Utterance) -> None:
        rate = utterance.options.sample_rate
        started = False
        try:
            async for item in utterance.items():
                pcm = getattr(item, "pcm", None)
                if pcm is None or not pcm.numel():
                    continue
                if not started:
                    await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
                    started = True
                await self.write_event(AudioChunk(rate=rate, width=2, channels=1, audio=to_int16(pcm).tobytes()).event())
        finally:
            utterance.cancel("disconnected")  # a no-op once it finished
        if not started:
            await self.write_event(AudioStart(rate=rate, width=2, channels=1).event())
        await self.write_event(AudioStop().event())

    async def _abandon(self) -> None:
        if self.streaming is not None:
            self.streaming.cancel()
        if self.speaking is not None:
            self.speaking.cancel()
        self.streaming = self.speaking = None

    async def disconnect(self) -> None:
        await self._abandon()


def _is_ssml_format(text_format: object) -> bool:
    return str(getattr(text_format, "value", text_format)).lower() == "ssml"


class WyomingDoor(Door):
    """``handler(reader, writer)`` for ``asyncio.start_server``."""

    def info(self) -> Info:
        voices = [TtsVoice(name=name, description=f"voicespec voice {name}", attribution=ATTRIBUTION, installed=True,
                           version=__version__, languages=LANGUAGES) for name in self.voices.names]
        program = TtsProgram(name="voicespec", description="voicespec: speech from a codec LM with lossless speculative "
                             "decoding", attribution=ATTRIBUTION, installed=True, version=__version__, voices=voices,
                             supports_synthesize_streaming=True)
        return Info(tts=[program])

    async def utterance(self, wanted: SynthesizeVoice | None) -> Utterance:
        """A new request's utterance, on the voice it names (its name, else the default voice)."""
        voice = await self.voice(wanted.name if wanted is not None else None)
        return self.open(voice, request_options(voice, self.config, Asked()))

    def handler(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> WyomingHandler:
        return WyomingHandler(self, reader, writer)
