"""One WebSocket connection of ``voicespec serve``: the protocol v1.1 state machine.

A :class:`Session` turns client messages into contexts (:class:`~voicespec.serve.context.Context`,
the session core every door shares: text to sentences to the decode worker), and sends what the
worker produces back in order through its :class:`~voicespec.serve.outbox.Outbox` (credits, sends,
a slow reader). Request options are :mod:`voicespec.serve.requests`'s, the reading of an idle
socket :mod:`voicespec.serve.reader`'s. It knows nothing of the listening socket or HTTP
(``server.py``, ``http.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import torch
from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from voicespec.frontend.lexicon import LexiconError
from voicespec.frontend.ssml import SSMLError, is_ssml
from voicespec.frontend.text import TextError
from voicespec.pipeline.synthesis import AudioChunk, SynthesisOptions
from voicespec.frontend.timestamps import Timestamps
from voicespec.options import SAMPLING_OPTIONS
from voicespec.pipeline.voice import Voice
from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.context import Context, TextTooLong
from voicespec.serve.encoders import make_encoder
from voicespec.serve.limits import Bucket
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.requests import Asked, UnknownDrafter, request_options
from voicespec.serve.outbox import Out, Outbox
from voicespec.serve.reader import Reader
from voicespec.serve.scheduler import FINISHED, DecodeWorker, Failed, FlushMark, Job
from voicespec.serve.voices import VoiceLoadError, VoiceSet

log = logging.getLogger("voicespec.server")


class _Context(Context):
    """A WebSocket context: its id, and the numbering and encoder of its audio frames."""

    def __init__(self, cid: str, session: Session, voice: Voice, options: SynthesisOptions) -> None:
        super().__init__(session.worker, session.metrics, voice, options, credits=session.credits, owner=session,
                         lexicon=session.started.lexicon, pacing_lead_s=session.pacing_lead_s)
        self.id = cid
        self.chars = 0  # all text received
        self.seq = 0
        self.encoder = make_encoder(session.started.encoding, session.options.sample_rate)  # stateful for opus


@contextlib.contextmanager
def _text_errors(ctx: _Context) -> Iterator[None]:
    """The client's text refused as the protocol says it (the context goes on unless it finished)."""
    try:
        yield
    except TextTooLong as e:
        raise P.ProtocolError(P.TEXT_TOO_LONG, str(e), ctx.id, context_ended=ctx.finished) from None
    except (SSMLError, LexiconError) as e:  # the client's markup or pronunciations: said, not skipped
        raise P.ProtocolError(P.BAD_TEXT, str(e), ctx.id, context_ended=ctx.finished) from None


class Session:
    """One WebSocket connection: its settings, contexts and outgoing queue.

    Everything here runs on the event loop; the decode worker reaches it only through
    :meth:`on_item`, which the server schedules onto the loop."""

    def __init__(self, ws: ServerConnection, config: ServerConfig, voices: VoiceSet, metrics: ServerMetrics,
                 worker: DecodeWorker, address: str = "?") -> None:
        self.ws = ws
        self.address = address  # the client's IP address (per-address session limit)
        self.cfg = config
        self.voices = voices
        self.voice = voices.default  # the session's voice once `start` names one
        self.metrics = metrics
        self.worker = worker
        self.started: P.Start | None = None
        self.asked: Asked | None = None  # what `start` asked for: a context's first text may override some
        self.options: SynthesisOptions | None = None
        self.pacing_lead_s = self.cfg.pacing_lead_s
        self.contexts: dict[str, _Context] = {}
        self.out = Outbox(ws, config, metrics, worker, self._frame, self._done)
        self.credits = self.out.credits
        self.messages = Bucket(config.max_messages_per_s, 2 * config.max_messages_per_s)
        self.text_chars = Bucket(config.max_text_chars_per_s, 2 * config.max_text_chars_per_s)
        self.reader = Reader(ws, config, self.out)  # its messages in order, and the deadlines of an idle client

    # -- outgoing (the queue and its sends: outbox.py)

    def put(self, out: Out) -> None:
        self.out.put(out)

    def error(self, code: str, text: str, cid: str | None = None, fatal: bool = False, ended: bool = False) -> None:
        self.out.error(code, text, cid, fatal, ended)

    def _frame(self, ctx: _Context, pcm: torch.Tensor | None) -> str | bytes | None:
        """One chunk of the context's audio as it goes out (None: the encoder's tail, at its end)."""
        start = self.started
        payload = ctx.encoder.encode(pcm) if pcm is not None else ctx.encoder.finish()
        ctx.samples += 0 if pcm is None else pcm.numel()
        if not payload:  # opus: no page completed yet
            return None
        if start.audio_transport == "binary":
            data: str | bytes = P.encode_frame(ctx.id, ctx.seq, payload, start.encoding)
        else:
            data = P.audio_message(ctx.id, ctx.seq, payload, start.encoding)
        ctx.seq += 1
        return data

    def _done(self, ctx: _Context) -> str:
        return P.message("done", context_id=ctx.id, stats=ctx.done_stats())

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
            if self.started.phoneme_timestamps:
                fields["phonemes"] = [p.to_dict() for p in item.phonemes]
            self.put(Out("msg", ctx, P.message("timestamps", context_id=ctx.id, sentence=item.sentence, **fields)))
        elif isinstance(item, FlushMark):
            self.put(Out("msg", ctx, P.message("flushed", context_id=ctx.id, flush_id=item.flush_id)))
        elif item is FINISHED:
            ctx.close(None)  # the `done` it sends counts it
            self.put(Out("done", ctx))
        elif isinstance(item, Failed):
            ctx.cancel("error")
            self.error(P.INTERNAL, f"synthesis failed: {item.error}", ctx.id, ended=True)

    def _forget(self, ctx: _Context) -> None:
        if self.contexts.get(ctx.id) is ctx:
            del self.contexts[ctx.id]

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
                and msg.context_id not in self.contexts else None)  # only where it would be used
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
            return P.parse_client_message(raw, strict=self.started is None or self.started.strict)
        except P.ProtocolError as e:
            self.error(e.code, e.message, e.context_id)
        except Exception as e:  # a bug: say so in an error frame, count it, and close this socket only
            log.exception("parsing a client message failed")
            self.fail(e)
        return None

    async def _dispatch(self, msg: P.ClientMessage) -> None:
        try:
            if isinstance(msg, P.Start):
                self._start(msg)
            elif isinstance(msg, P.ClientStats):
                self.metrics.client_underruns.inc(msg.underruns)
                self.metrics.client_underrun_s.inc(msg.underrun_ms / 1000)
            elif self.started is None:
                raise P.ProtocolError(P.NOT_STARTED, "send a 'start' message first", getattr(msg, "context_id", None))
            elif isinstance(msg, P.Text):
                await self._text(msg)
            elif isinstance(msg, P.Flush):
                await self._flush(msg)
            elif isinstance(msg, P.End):
                await self._end(msg)
            elif isinstance(msg, P.Cancel):
                self._cancel(msg.context_id)
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

    def _voice(self, name: str | None, cid: str | None = None) -> Voice:
        voice = self.voices.loaded(name)
        if voice is None:  # for a context (cid): its first text is refused, no context is left behind
            raise P.ProtocolError(P.UNKNOWN_VOICE, f"unknown voice {name!r}; this server speaks "
                                  f"{', '.join(self.voices.names)} (GET /v1/voices)", cid, context_ended=cid is not None)
        return voice

    def _start(self, msg: P.Start) -> None:
        if self.started is not None:
            raise P.ProtocolError(P.ALREADY_STARTED, "this connection has already started; open another for other settings")
        voice = self._voice(msg.voice)
        asked = Asked(drafter=msg.drafter, gamma=msg.gamma, tree=msg.tree, seed=msg.seed,
                      latency_budget_ms=msg.latency_budget_ms, sampling=msg.sampling_overrides(), speed=msg.speed,
                      encoding=msg.encoding, sample_rate=msg.sample_rate,
                      timestamps=msg.word_timestamps or msg.phoneme_timestamps)
        try:
            options = request_options(voice, self.cfg, asked)
            if msg.lexicon is not None:
                voice.script("a", lexicon=msg.lexicon)  # every entry is a pronunciation this voice can say
        except UnknownDrafter as e:
            raise P.ProtocolError(P.UNKNOWN_DRAFTER, str(e)) from None
        except ValueError as e:
            raise P.ProtocolError(P.BAD_OPTION, str(e)) from None
        self.started, self.asked, self.options, self.voice = msg, asked, options, voice
        if msg.pacing_lead_ms is not None:
            self.pacing_lead_s = msg.pacing_lead_ms / 1000
        decode = options.decode
        self.put(Out("msg", None, P.message(
            "ready", protocol=P.VERSION, protocol_version=P.PROTOCOL_VERSION, voice=voice.name,
            sample_rate=options.sample_rate, channels=1, encoding=msg.encoding, audio_transport=msg.audio_transport,
            drafter=options.drafter, gamma=decode.gamma, latency_budget_ms=msg.latency_budget_ms, seed=msg.seed,
            pacing_lead_ms=None if self.pacing_lead_s is None else self.pacing_lead_s * 1000,
            sampling={o.name: getattr(decode.sampling, o.name) for o in SAMPLING_OPTIONS}, speed=options.speed,
            word_timestamps=msg.word_timestamps, phoneme_timestamps=msg.phoneme_timestamps, strict=msg.strict,
            ignored_fields=list(msg.ignored), max_text_chars=self.cfg.max_text_chars, drafters=voice.drafter_names,
            voices=self.voices.names)))

    def _context_options(self, cid: str, msg: P.Text) -> tuple[Voice, SynthesisOptions]:
        """A new context's voice and options: the session's, with its first text's own on top (a
        drafter the other voice lacks gives way to that voice's default)."""
        if not msg.options:
            return self.voice, self.options
        o = dict(msg.options)
        voice = self._voice(o.pop("voice"), cid) if "voice" in o else self.voice
        own = {k: o.pop(k) for k in list(o) if k not in ("speed", "seed")}
        asked = self.asked.merged(sampling=own, **o)
        if asked.drafter not in voice.drafter_names:
            asked = replace(asked, drafter=None)
        try:
            return voice, request_options(voice, self.cfg, asked)
        except ValueError as e:
            raise P.ProtocolError(P.BAD_OPTION, str(e), cid, context_ended=True) from None

    def _open(self, msg: P.Text) -> _Context:
        """A context for a first text (its options checked first: a refused first text leaves
        nothing behind)."""
        cid = msg.context_id
        voice, options = self._context_options(cid, msg)
        if len(self.contexts) >= self.cfg.max_contexts_per_session:
            raise P.ProtocolError(P.TOO_MANY_CONTEXTS, f"at most {self.cfg.max_contexts_per_session} contexts "
                                  "may be active on one connection; end or cancel one first", cid)
        ctx = self.contexts[cid] = _Context(cid, self, voice, options)
        ctx.on_finished = self._forget
        return ctx

    async def _text(self, msg: P.Text) -> None:
        cid = msg.context_id
        ctx = self.contexts.get(cid)
        if ctx is not None and msg.options:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has begun: its options ({', '.join(msg.options)}) "
                                  "go on its first text message", cid)
        if ctx is None:
            ctx = self._open(msg)
        if ctx.ended:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has ended; use a new context_id", cid)
        if not self.text_chars.take(len(msg.text)):
            self.reject(P.RATE_LIMITED, f"more than {self.cfg.max_text_chars_per_s:g} characters of text per second; "
                        "closing", P.CLOSE_RATE_LIMITED)
            return
        limit = self.cfg.max_text_chars
        if ctx.chars + len(msg.text) > limit:
            raise P.ProtocolError(P.TEXT_TOO_LONG, f"text rejected: the context would have {ctx.chars + len(msg.text)} "
                                  f"characters; the limit is {limit}", cid)
        with _text_errors(ctx):
            if msg.ssml or is_ssml(msg.text):  # one whole document: the text before it is spoken first, whole
                await ctx.add_markup(msg.text)
            else:
                await ctx.add(msg.text)
        ctx.chars += len(msg.text)

    async def _flush(self, msg: P.Flush) -> None:
        ctx = self.contexts.get(msg.context_id)
        if ctx is not None:
            with _text_errors(ctx):
                if await ctx.flush(msg.flush_id):
                    return  # acknowledged when the audio before it has been made
        self.put(Out("msg", ctx, P.message("flushed", context_id=msg.context_id, flush_id=msg.flush_id)))

    async def _end(self, msg: P.End) -> None:
        cid = msg.context_id
        ctx = self.contexts.get(cid)
        if ctx is None:
            # context_ended: no `done` will come for it (its text never began one, or was rejected)
            self.error(P.UNKNOWN_CONTEXT, f"no active context {cid!r} (send 'text' first)", cid, ended=True)
            return
        if ctx.ended:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has already ended", cid)
        try:
            with _text_errors(ctx):
                await ctx.end()
        except TextError as e:  # nothing in it was speakable: it has finished
            self.error(P.BAD_TEXT, str(e), cid, ended=True)

    def _cancel(self, cid: str) -> None:
        ctx = self.contexts.get(cid)
        if ctx is not None:
            ctx.cancel("cancelled")
        self.put(Out("msg", None, P.message("cancelled", context_id=cid)))

    def busy(self) -> bool:
        """Audio is being made or sent (a context waiting for more text does not count)."""
        return self.out.pending or any(
            c.job is not None and not c.job.finished and c.job.starved_at != c.job.input_version
            for c in self.contexts.values())

    def close(self) -> None:
        """The socket is gone: stop every context (the worker drops them within one step)."""
        for ctx in list(self.contexts.values()):
            ctx.cancel("disconnected")

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
