"""One context spoken through the decode worker for the doors that are not the WebSocket
protocol (the OpenAI endpoint, Wyoming): a :class:`~voicespec.serve.context.Context` whose items
come back as an async iterator, in order.

Audio waiting in its queue holds a credit, so a reader that stops reading pauses this utterance
only (the worker skips it), as a slow WebSocket client does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from voicespec.frontend.timestamps import Timestamps
from voicespec.pipeline.synthesis import AudioChunk, SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve.context import Context
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import FINISHED, AtCapacity, DecodeWorker, Failed, Job
from voicespec.serve.text_reader import TextReader


class SynthesisFailed(RuntimeError):
    """The worker could not finish the utterance (a bug, or the device failed)."""


class Utterance(Context):
    """A :class:`Context` read with :meth:`items` (which may interleave with ``add`` and
    ``end``). ``stats``: the ``done`` statistics, once :meth:`items` has ended."""

    def __init__(self, worker: DecodeWorker, metrics: ServerMetrics, voice: Voice, options: SynthesisOptions,
                 queue_chunks: int, pacing_lead_s: float | None = None, text_reader: TextReader | None = None) -> None:
        super().__init__(worker, metrics, voice, options, pacing_lead_s=pacing_lead_s, text_reader=text_reader)
        self.queue_chunks = queue_chunks
        self.stats: dict[str, Any] | None = None
        self._items: asyncio.Queue[Any] = asyncio.Queue()

    def on_item(self, job: Job, item: Any) -> None:
        self._items.put_nowait(item)

    async def items(self) -> AsyncIterator[AudioChunk | Timestamps]:
        """Audio chunks (and timestamps, where asked for) until the end of the utterance;
        SynthesisFailed if the worker failed."""
        while True:
            item = await self._items.get()
            if isinstance(item, AudioChunk):
                full = self.credits.outstanding >= self.queue_chunks
                self.credits.released += 1
                if full:  # the worker may be skipping this utterance: let it look again
                    self.worker.wake()
                self.samples += item.pcm.numel()
                if self.t_first_audio is None and item.pcm.numel():
                    self.t_first_audio = time.perf_counter()
                yield item
            elif isinstance(item, Timestamps):
                yield item
            elif item is FINISHED:
                self.stats = self.done_stats()
                self.close(None)
                return
            elif isinstance(item, Failed):
                self.cancel("error")
                if isinstance(item.error, AtCapacity):  # turned away before it spoke (DecodeWorker's waiting limit)
                    raise AtCapacity(str(item.error))
                raise SynthesisFailed(f"synthesis failed: {item.error}")
