"""One WebSocket connection of ``voicespec serve``: the protocol v1.1 state machine.

A :class:`Session` reads client messages in order (:mod:`voicespec.serve.reader`: the deadlines of
an idle socket), settles ``start`` (:mod:`voicespec.serve.ws_start`), hands text to its contexts
(:mod:`voicespec.serve.ws_contexts`, over the session core every door shares) and sends what the
decode worker produces back in order through its :class:`~voicespec.serve.outbox.Outbox` (credits,
sends, a slow reader). It knows nothing of the listening socket or HTTP (``server.py``, ``http.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voicespec.frontend.timestamps import Timestamps
from voicespec.pipeline.synthesis import AudioChunk
from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.limits import Bucket
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.outbox import Out, Outbox
from voicespec.serve.reader import Reader
from voicespec.serve.scheduler import FINISHED, AtCapacity, DecodeWorker, Failed, FlushMark, Job
from voicespec.serve.voices import VoiceLoadError, VoiceSet
from voicespec.serve.ws_contexts import Contexts, WsContext
from voicespec.serve.text_reader import TextReader
from voicespec.serve.ws_start import Started, ready_message, start

log = logging.getLogger("voicespec.server")


class Session:
    """One WebSocket connection: its settings, contexts and outgoing queue.

    Everything here runs on the event loop; the decode worker reaches it only through
    :meth:`on_item`, which the server schedules onto the loop."""

    def __init__(self, ws: ServerConnection, config: ServerConfig, voices: VoiceSet, metrics: ServerMetrics,
                 worker: DecodeWorker, address: str = "?", text_reader: TextReader | None = None) -> None:
        self.ws = ws
        self.text_reader = text_reader
        self.address = address  # the client's IP address (per-address session limit)
        self.cfg = config
        self.voices = voices
        self.metrics = metrics
        self.worker = worker
        self.started: Started | None = None
        self.out = Outbox(ws, config, metrics, worker, WsContext.frame, WsContext.done_message)
        self.credits = self.out.credits
        self.contexts = Contexts(self)
        self.messages = Bucket(config.max_messages_per_s, 2 * config.max_messages_per_s)
        self.reader = Reader(ws, config, self.out)  # its messages in order, and the deadlines of an idle client

    # -- outgoing (the queue and its sends: outbox.py)

    def put(self, out: Out) -> None:
        self.out.put(out)

    def error(self, code: str, text: str, cid: str | None = None, fatal: bool = False, ended: bool = False) -> None:
        self.out.error(code, text, cid, fatal, ended)

    # -- from the decode worker (called on the event loop)

    def on_item(self, job: Job, item: Any) -> None:
        ctx = job.ctx
        if ctx.cancelled:
            if isinstance(item, AudioChunk):
                self.out.release_credit()
            return
        if isinstance(item, AudioChunk):
            self.put(Out("audio", ctx, item.pcm))  # its credit is released by the sender
        elif isinstance(item, Timestamps):
            fields = {"words": [w.to_dict() for w in item.words]}
            if self.started.msg.phoneme_timestamps:
                fields["phonemes"] = [p.to_dict() for p in item.phonemes]
            self.put(Out("msg", ctx, P.message("timestamps", context_id=ctx.id, sentence=item.sentence, **fields)))
        elif isinstance(item, FlushMark):
            self.put(Out("msg", ctx, P.message("flushed", context_id=ctx.id, flush_id=item.flush_id)))
        elif item is FINISHED:
            ctx.close(None)  # the `done` it sends counts it
            self.put(Out("done", ctx))
        elif isinstance(item, Failed) and isinstance(item.error, AtCapacity):  # turned away: this context only
            ctx.cancel("error")
            self.error(P.AT_CAPACITY, str(item.error), ctx.id, ended=True)
        elif isinstance(item, Failed):
            ctx.cancel("error")
            self.error(P.INTERNAL, f"synthesis failed: {item.error}", ctx.id, ended=True)

    # -- client messages

    async def receive(self, raw: str | bytes) -> None:
        """One client message; a voice it names that is not loaded yet is loaded first, and its
        text goes through the front end, both on a thread: other connections go on, and this one
        reads its next message after, so its messages still take effect in order."""
        msg = self._parse(raw)
        if msg is None:
            return
        name = (msg.voice if isinstance(msg, P.Start) and self.started is None else
                msg.options.get("voice") if isinstance(msg, P.Text) and self.started is not None
                and self.contexts.get(msg.context_id) is None else None)  # only where it would be used
        if name is not None and self.voices.canonical(name) is not None and self.voices.loaded(name) is None:
            try:
                await self.voices.ensure(name)
            except VoiceLoadError as e:  # a broken voice folder (logged once by VoiceSet): this request fails
                cid = getattr(msg, "context_id", None)
                self.error(P.UNKNOWN_VOICE, str(e), cid, ended=cid is not None)
                return
        await self._dispatch(msg)

    def _parse(self, raw: str | bytes) -> P.ClientMessage | None:
        if self.out.closing:
            return None
        if not self.messages.take():
            self.reject(P.RATE_LIMITED, f"more than {self.cfg.max_messages_per_s:g} messages per second; closing",
                        P.CLOSE_RATE_LIMITED)
            return None
        try:
            return P.parse_client_message(raw, strict=self.started is None or self.started.msg.strict)
        except P.ProtocolError as e:
            self.error(e.code, e.message, e.context_id)
        except Exception as e:  # a bug: say so in an error frame, count it, and close this socket only
            log.exception("parsing a client message failed")
            self.fail(e)
        return None

    async def _dispatch(self, msg: P.ClientMessage) -> None:
        try:
            if isinstance(msg, P.Start):
                if self.started is not None:
                    raise P.ProtocolError(P.ALREADY_STARTED, "this connection has already started; open another "
                                          "for other settings")
                self.started = start(msg, self.voices, self.cfg)
                self.put(Out("msg", None, ready_message(self.started, self.cfg, self.voices)))
            elif isinstance(msg, P.ClientStats):
                self.metrics.client_underruns.inc(msg.underruns)
                self.metrics.client_underrun_s.inc(msg.underrun_ms / 1000)
            elif self.started is None:
                raise P.ProtocolError(P.NOT_STARTED, "send a 'start' message first", getattr(msg, "context_id", None))
            elif isinstance(msg, P.Text):
                await self.contexts.text(msg)
            elif isinstance(msg, P.Flush):
                await self.contexts.flush(msg)
            elif isinstance(msg, P.End):
                await self.contexts.end(msg)
            elif isinstance(msg, P.Cancel):
                self.contexts.cancel(msg.context_id)
        except P.ProtocolError as e:
            self.error(e.code, e.message, e.context_id, ended=e.context_ended)
        except Exception as e:  # a bug: say so in an error frame, count it, and close this socket only
            log.exception("handling a client message failed")
            self.fail(e)

    def fail(self, e: BaseException) -> None:
        """The last resort: ``internal`` (fatal) to the client, then close 1011 once it is sent."""
        self.reject(P.INTERNAL, f"internal error ({type(e).__name__}); closing the connection", P.CLOSE_INTERNAL)

    def reject(self, code: str, text: str, close_code: int) -> None:
        """A fatal error: the error frame, then the close once it is sent (once per connection)."""
        if self.out.closing:
            return
        self.error(code, text, fatal=True)
        self.out.closing = True
        asyncio.ensure_future(self._close_after_drain(close_code, code))

    async def _close_after_drain(self, code: int, reason: str) -> None:
        await self.out.drain()
        await self.ws.close(code, reason)

    def busy(self) -> bool:
        """Audio is being made or sent (a context waiting for more text does not count)."""
        return self.out.pending or self.contexts.busy()

    def close(self) -> None:
        """The socket is gone: stop every context (the worker drops them within one step)."""
        self.contexts.close("disconnected")

    # -- the connection

    async def serve(self) -> None:
        """Read client messages until the socket closes or goes idle; then stop every context."""
        sender = asyncio.create_task(self.out.run())
        try:
            await self.reader.run(sender, self.receive, lambda: self.started is not None, self.busy)
        except ConnectionClosed:
            pass
        finally:
            self.close()
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, ConnectionClosed):
                await sender  # its end is expected here: not an unretrieved task exception
