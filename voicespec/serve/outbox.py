"""A WebSocket connection's outgoing side: one ordered queue of messages and audio, the audio
credits that pause a slow reader's contexts, and the sends themselves (a send that stops making
progress drops the client, so its slot and cache rows are freed).

Audio in the queue holds a credit (``send_queue_chunks`` per connection): the decode worker skips
the connection's contexts while it has that many chunks out, so a client that reads slowly
pauses only itself. Messages the client provokes (errors, acks) hold none; a client that keeps
sending without reading is cut off rather than queued for ever.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import Credits, DecodeWorker

log = logging.getLogger("voicespec.server")


@dataclass(frozen=True)
class Out:
    kind: str  # "msg" (payload: JSON text), "audio" (payload: float PCM), "done" (built when sent)
    ctx: Any  # the context it belongs to (skipped once that is cancelled), or None
    payload: Any = None


class Outbox:
    """``frame(ctx, pcm)``: a context's audio chunk as the bytes (or text) to send, None when its
    encoder has nothing whole yet (``pcm`` None: the encoder's tail); ``done(ctx)``: its ``done``
    message, built when it is sent."""

    def __init__(self, ws: ServerConnection, config: ServerConfig, metrics: ServerMetrics, worker: DecodeWorker,
                 frame: Callable[[Any, Any], str | bytes | None], done: Callable[[Any], str]) -> None:
        self.ws = ws
        self.cfg = config
        self.metrics = metrics
        self.worker = worker
        self.frame = frame
        self.done = done
        self.credits = Credits()
        self.queue: deque[Out] = deque()
        self.ready = asyncio.Event()
        self.sending = False  # a send is in flight (popped from the queue, not yet written)
        self.closing = False  # the connection is being closed: nothing more is read from it

    def put(self, out: Out) -> None:
        self.queue.append(out)
        self.ready.set()
        if len(self.queue) > 4 * self.cfg.send_queue_chunks + 256 and not self.closing:
            self.closing = True
            self.metrics.error(P.SLOW_CLIENT)
            asyncio.ensure_future(self.ws.close(P.CLOSE_SLOW_CLIENT, "client is not reading its messages"))

    def error(self, code: str, text: str, cid: str | None = None, fatal: bool = False, ended: bool = False) -> None:
        self.metrics.error(code)
        self.put(Out("msg", None, P.error_message(code, text, cid, fatal, ended)))

    def release_credit(self) -> None:
        full = self.credits.outstanding >= self.cfg.send_queue_chunks
        self.credits.released += 1
        if full:  # the worker may be skipping this connection's contexts: let it look again
            self.worker.wake()

    @property
    def pending(self) -> bool:
        """Something is queued or being written."""
        return bool(self.queue) or self.sending

    async def run(self) -> None:
        """Send until the connection closes; a bug while sending still tells the client why it closes."""
        try:
            await self._send_loop()
        except ConnectionClosed:
            raise
        except Exception as e:
            log.exception("sending to a client failed")
            self.metrics.error(P.INTERNAL)
            with contextlib.suppress(ConnectionClosed):
                await self.ws.send(P.error_message(P.INTERNAL, f"internal error ({type(e).__name__}); closing "
                                                   "the connection", None, True, False))
                await self.ws.close(P.CLOSE_INTERNAL, "internal error")

    async def _send_loop(self) -> None:
        while True:
            while not self.queue:
                self.ready.clear()
                await self.ready.wait()
            out = self.queue.popleft()
            if out.kind == "audio":
                try:
                    if not out.ctx.cancelled:
                        await self._send_audio(out.ctx, out.payload)
                finally:
                    self.release_credit()
                continue
            if out.ctx is not None and out.ctx.cancelled:
                continue
            if out.kind == "done":
                await self._send_audio(out.ctx, None)
                await self.send(self.done(out.ctx))
            else:
                await self.send(out.payload)

    async def _send_audio(self, ctx: Any, pcm: Any) -> None:
        data = self.frame(ctx, pcm)
        if data is None:
            return
        await self.send(data)
        if ctx.t_first_audio is None:
            ctx.t_first_audio = time.perf_counter()

    async def send(self, payload: str | bytes) -> None:
        """Send, or close the connection if the client has stopped reading (no progress for
        ``stalled_send_timeout_s``)."""
        self.sending = True
        try:
            await asyncio.wait_for(self.ws.send(payload), self.cfg.stalled_send_timeout_s)
        except TimeoutError:
            self.metrics.error(P.SLOW_CLIENT)
            self.closing = True
            self.ws.transport.abort()  # nothing more can be written to it, not even a close frame
            raise ConnectionClosed(None, None) from None
        finally:
            self.sending = False

    async def drain(self, timeout: float = 2.0) -> None:
        """Let what is queued (a final error message) go out before the connection closes."""
        t = time.monotonic() + timeout
        while self.pending and time.monotonic() < t:
            await asyncio.sleep(0.01)
