"""What every door but the WebSocket protocol shares: the server's parts, a request's voice, and
admission, one :class:`~voicespec.serve.utterance.Utterance` per request, counted against the
server's ``max_sessions`` together with every other door's."""

from __future__ import annotations

from collections.abc import Callable

from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve.config import ServerConfig
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import AtCapacity, DecodeWorker
from voicespec.serve.utterance import Utterance
from voicespec.serve.text_reader import TextReader
from voicespec.serve.voices import VoiceSet


class UnknownVoice(LookupError):
    pass


class Door:
    """``refusal()`` says why one more request does not fit (None: it does); ``active``: this
    door's utterances in flight."""

    def __init__(self, config: ServerConfig, voices: VoiceSet, metrics: ServerMetrics, worker: DecodeWorker,
                 refusal: Callable[[], str | None], text_reader: TextReader | None = None) -> None:
        self.config = config
        self.text_reader = text_reader
        self.voices = voices
        self.metrics = metrics
        self.worker = worker
        self.refusal = refusal
        self.active: set[Utterance] = set()

    async def voice(self, name: str | None) -> Voice:
        """The voice a request names (None: the default), loaded on a thread if it is not yet;
        UnknownVoice, or VoiceLoadError for a broken installed one."""
        if name is None:
            return self.voices.default
        if self.voices.canonical(name) is None:
            raise UnknownVoice(f"unknown voice {name!r}; this server speaks {', '.join(self.voices.names)}")
        await self.voices.ensure(name)
        return self.voices.loaded(name)

    def open(self, voice: Voice, options: SynthesisOptions) -> Utterance:
        """A new request's utterance; AtCapacity when the server is full (``TTSServer.refusal``)."""
        if (why := self.refusal()) is not None:  # each door counts the error as it answers it
            raise AtCapacity(why)
        utterance = Utterance(self.worker, self.metrics, voice, options, self.config.send_queue_chunks,
                              text_reader=self.text_reader)
        self.active.add(utterance)
        utterance.on_finished = self.active.discard
        return utterance
