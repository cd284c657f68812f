"""``voicespec serve``: streaming TTS over WebSockets (protocol v1, see ``stream/PROTOCOL.md``).

One asyncio event loop owns every socket; the model runs on the decode worker thread of
``scheduler.py``, which steps the active contexts round-robin, one audio chunk at a time. So many
sessions interleave at decode-step granularity, a cancel takes effect within one decode step,
and the event loop never waits on the model. Each connection has a bounded number of audio
chunks in flight: when a client reads slowly its contexts are skipped by the worker until it
catches up, so a slow reader slows only itself. Plain HTTP on the same port serves ``/healthz``,
``/metrics`` and the browser player (``/``).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import socket
import time
import unicodedata
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import torch
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from voicespec.serve import protocol as P
from voicespec.audio import to_encoding
from voicespec.engine.controller import ControllerConfig
from voicespec.engine.decoder import DecodeConfig
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import FINISHED, Credits, DecodeWorker, Failed, FlushMark, IncrementalStream, Job
from voicespec.pipeline.synthesis import AudioChunk, SynthesisOptions
from voicespec.frontend.text import TextError
from voicespec.paths import STATIC_DIR
from voicespec.pipeline.voice import Voice, load_voice

log = logging.getLogger("voicespec.serve.server")

WS_PATH = "/v1/stream"
STATIC_FILES = {"/": ("index.html", "text/html"), "/index.html": ("index.html", "text/html"),
                "/player.js": ("player.js", "text/javascript"), "/worklet.js": ("worklet.js", "text/javascript"),
                "/PROTOCOL.md": ("PROTOCOL.md", "text/markdown")}


@dataclass(frozen=True)
class ServerConfig:
    """Everything an operator sets; per-session choices (rate, sampling, ...) come in ``start``."""

    host: str = "127.0.0.1"
    port: int = 8765  # 0: any free port (see TTSServer.port)
    voice: str | None = None  # voice folder or name under models/ (None: the default voice)
    drafter: str | None = None  # default drafter (None: the voice's)
    gamma: int | str = "auto"  # default draft length
    max_steps: int = 2000  # per sentence (the voice's own runaway guard also applies)
    max_sessions: int = 16
    max_contexts_per_session: int = 8
    api_key: str | None = None
    allowed_origins: tuple[str, ...] = ()  # browser origins besides the page this server serves; "*": any
    max_message_bytes: int = 65536  # larger client messages close the socket with 1009
    max_text_chars: int = 5000  # per context, all its text together
    inactivity_timeout_s: float = 60.0  # idle sockets (no message, nothing being synthesized) are closed
    ping_interval_s: float | None = 20.0
    ping_timeout_s: float | None = 20.0
    send_queue_chunks: int = 32  # audio chunks in flight per connection before its contexts pause
    send_buffer_bytes: int | None = None  # kernel send buffer per socket (None: the OS's autotuning, up to MBs)
    pacing_lead_s: float | None = None  # default pacing: stay this far ahead of real time (None: no pacing)

    def __post_init__(self) -> None:
        for name in ("max_sessions", "max_contexts_per_session", "max_message_bytes", "max_text_chars",
                     "send_queue_chunks", "max_steps"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.inactivity_timeout_s <= 0:
            raise ValueError("inactivity_timeout_s must be > 0")
        if self.pacing_lead_s is not None and self.pacing_lead_s <= 0:
            raise ValueError("pacing_lead_s must be > 0 (or None for no pacing)")
        DecodeConfig(gamma=self.gamma)  # validates gamma


# ----------------------------------------------------------------------------- connections


@dataclass(eq=False)
class _Context:
    id: str
    buffer: str = ""  # text not yet handed to synthesis (no finished sentence yet)
    chars: int = 0  # all text received
    job: Job | None = None
    seq: int = 0
    ended: bool = False
    cancelled: bool = False
    t_ready: float | None = None  # when its first text was handed to synthesis
    t_first_audio: float | None = None  # when its first audio frame went out
    samples_sent: int = 0


@dataclass(frozen=True)
class _Out:
    kind: str  # "msg" (payload: JSON text), "audio" (payload: float PCM), "done" (built when sent)
    ctx: _Context | None
    payload: Any = None


class _Session:
    """One WebSocket connection: its settings, contexts and outgoing queue."""

    def __init__(self, server: TTSServer, ws: ServerConnection) -> None:
        self.server = server
        self.ws = ws
        self.cfg = server.config
        self.started: P.Start | None = None
        self.options: SynthesisOptions | None = None
        self.pacing_lead_s = self.cfg.pacing_lead_s
        self.contexts: dict[str, _Context] = {}
        self.credits = Credits()
        self.outbox: deque[_Out] = deque()
        self.outbox_ready = asyncio.Event()
        self.closing = False

    # -- outgoing

    def put(self, out: _Out) -> None:
        self.outbox.append(out)
        self.outbox_ready.set()
        # Messages the client provokes (errors, acks) are not bounded by the audio credits; a
        # client that keeps sending without reading is cut off rather than queued for forever.
        if len(self.outbox) > 4 * self.cfg.send_queue_chunks + 256 and not self.closing:
            self.closing = True
            self.server.metrics.error(P.SLOW_CLIENT)
            asyncio.ensure_future(self.ws.close(P.CLOSE_SLOW_CLIENT, "client is not reading its messages"))

    def error(self, code: str, text: str, cid: str | None = None, fatal: bool = False, ended: bool = False) -> None:
        self.server.metrics.error(code)
        self.put(_Out("msg", None, P.error_message(code, text, cid, fatal, ended)))

    async def sender(self) -> None:
        while True:
            while not self.outbox:
                self.outbox_ready.clear()
                await self.outbox_ready.wait()
            out = self.outbox.popleft()
            if out.kind == "audio":
                try:
                    if not out.ctx.cancelled:
                        await self._send_audio(out.ctx, out.payload)
                finally:
                    self._release_credit()
                continue
            if out.ctx is not None and out.ctx.cancelled:
                continue
            if out.kind == "done":
                await self.ws.send(self._done(out.ctx))
            else:
                await self.ws.send(out.payload)

    def _release_credit(self) -> None:
        full = self.credits.outstanding >= self.cfg.send_queue_chunks
        self.credits.released += 1
        if full:  # the worker may be skipping this session's contexts: let it look again
            self.server.worker.wake()

    async def _send_audio(self, ctx: _Context, pcm: torch.Tensor) -> None:
        start = self.started
        payload = to_encoding(pcm, start.encoding)
        if start.audio_transport == "binary":
            data: str | bytes = P.encode_frame(ctx.id, ctx.seq, payload, start.encoding)
        else:
            data = P.audio_message(ctx.id, ctx.seq, payload, start.encoding)
        await self.ws.send(data)
        ctx.seq += 1
        ctx.samples_sent += pcm.numel()
        if ctx.t_first_audio is None:
            ctx.t_first_audio = time.perf_counter()

    def _done(self, ctx: _Context) -> str:
        job = ctx.job
        st = job.stream.stats
        d = st.decode
        rate = st.sample_rate
        audio_s = ctx.samples_sent / rate
        ttfa = None if ctx.t_first_audio is None else ctx.t_first_audio - ctx.t_ready
        gammas = d.gammas
        counts: dict[str, int] = {}
        for g in gammas:
            counts[str(g)] = counts.get(str(g), 0) + 1
        decode = job.stream.options.decode
        cap = decode.controller.time_cap_s
        stats = {
            "ttfa_ms": None if ttfa is None else round(ttfa * 1000, 2),
            "audio_s": round(audio_s, 4),
            "samples": ctx.samples_sent,
            "compute_s": round(job.busy_s, 4),
            "rtf": round(job.busy_s / audio_s, 4) if audio_s else None,
            "wall_s": round(time.perf_counter() - ctx.t_ready, 4),
            "sentences": st.sentences,
            "frames": st.frames,
            "steps": d.generated_steps,
            "target_passes": d.target_passes,
            "drafted": d.drafted,
            "accepted": d.accepted,
            "acceptance": round(d.acceptance_rate, 4),
            "mean_accepted_length": round(d.mean_accepted_length, 4),
            "drafter": job.stream.options.drafter,
            "gamma": decode.gamma,
            "gamma_mean": round(sum(gammas) / len(gammas), 3) if gammas else 0.0,
            "gamma_counts": counts,
            "latency_budget_ms": None if cap is None else round(cap * 1000, 3),
            "finish_reason": d.finish_reason,
        }
        self.server.metrics.record_done(ttfa, stats, d)
        return P.message("done", context_id=ctx.id, stats=stats)

    # -- from the decode worker (called on the event loop)

    def on_item(self, job: Job, item: Any) -> None:
        ctx = job.ctx
        if ctx.cancelled:
            if isinstance(item, AudioChunk):
                self._release_credit()
            return
        if isinstance(item, AudioChunk):
            self.put(_Out("audio", ctx, item.pcm))  # its credit is released by the sender
        elif isinstance(item, FlushMark):
            self.put(_Out("msg", ctx, P.message("flushed", context_id=ctx.id, flush_id=item.flush_id)))
        elif item is FINISHED:
            self._forget(ctx)
            self.put(_Out("done", ctx))
        elif isinstance(item, Failed):
            self._forget(ctx)
            ctx.cancelled = True
            self.server.metrics.finished("error")
            self.error(P.INTERNAL, f"synthesis failed: {item.error}", ctx.id, ended=True)

    def _forget(self, ctx: _Context) -> None:
        if self.contexts.get(ctx.id) is ctx:
            del self.contexts[ctx.id]
            self.server.metrics.active_contexts.dec()

    # -- client messages

    def handle(self, raw: str | bytes) -> None:
        try:
            msg = P.parse_client_message(raw)
            if isinstance(msg, P.Start):
                self._start(msg)
            elif isinstance(msg, P.ClientStats):
                self.server.metrics.client_underruns.inc(msg.underruns)
                self.server.metrics.client_underrun_s.inc(msg.underrun_ms / 1000)
            elif self.started is None:
                raise P.ProtocolError(P.NOT_STARTED, "send a 'start' message first", getattr(msg, "context_id", None))
            elif isinstance(msg, P.Text):
                self._text(msg)
            elif isinstance(msg, P.Flush):
                self._flush(msg)
            elif isinstance(msg, P.End):
                self._end(msg)
            elif isinstance(msg, P.Cancel):
                self._cancel(msg.context_id)
        except P.ProtocolError as e:
            self.error(e.code, e.message, e.context_id)

    def _start(self, msg: P.Start) -> None:
        if self.started is not None:
            raise P.ProtocolError(P.ALREADY_STARTED, "this connection has already started; open another for other settings")
        voice, cfg = self.server.voice, self.cfg
        if msg.voice not in (None, "default", voice.name, cfg.voice):
            raise P.ProtocolError(P.UNKNOWN_VOICE, f"unknown voice {msg.voice!r}; this server speaks {voice.name!r}")
        drafter = msg.drafter or cfg.drafter or voice.config.default_drafter
        if drafter not in voice.drafter_names:
            raise P.ProtocolError(P.UNKNOWN_DRAFTER, f"unknown drafter {drafter!r}; choose one of: {', '.join(voice.drafter_names)}")
        try:
            sampling = replace(voice.sampling, **msg.sampling_overrides())
            gamma = msg.gamma if msg.gamma is not None else ("auto" if msg.latency_budget_ms else cfg.gamma)
            cap = None if msg.latency_budget_ms is None else msg.latency_budget_ms / 1000
            decode = DecodeConfig(sampling, gamma=gamma, max_steps=cfg.max_steps, seed=msg.seed,
                                  controller=ControllerConfig(time_cap_s=cap))
            options = SynthesisOptions(decode, drafter=drafter, sample_rate=msg.sample_rate or voice.codec.sample_rate)
        except ValueError as e:
            raise P.ProtocolError(P.BAD_OPTION, str(e)) from None
        self.started, self.options = msg, options
        if msg.pacing_lead_ms is not None:
            self.pacing_lead_s = msg.pacing_lead_ms / 1000
        self.put(_Out("msg", None, P.message(
            "ready", protocol=P.VERSION, voice=voice.name, sample_rate=options.sample_rate, channels=1,
            encoding=msg.encoding, audio_transport=msg.audio_transport, drafter=drafter, gamma=gamma,
            latency_budget_ms=msg.latency_budget_ms, seed=msg.seed,
            pacing_lead_ms=None if self.pacing_lead_s is None else self.pacing_lead_s * 1000,
            sampling={k: getattr(sampling, k) for k in ("temperature", "top_k", "top_p", "repetition_penalty")},
            max_text_chars=cfg.max_text_chars, drafters=voice.drafter_names)))

    def _context(self, cid: str, create: bool) -> _Context | None:
        ctx = self.contexts.get(cid)
        if ctx is None and create:
            if len(self.contexts) >= self.cfg.max_contexts_per_session:
                raise P.ProtocolError(P.TOO_MANY_CONTEXTS, f"at most {self.cfg.max_contexts_per_session} contexts "
                                      "may be active on one connection; end or cancel one first", cid)
            ctx = self.contexts[cid] = _Context(cid)
            self.server.metrics.active_contexts.inc()
            self.server.metrics.contexts_started.inc()
        return ctx

    def _text(self, msg: P.Text) -> None:
        cid = msg.context_id
        ctx = self._context(cid, create=True)
        if ctx.ended:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has ended; use a new context_id", cid)
        limit = self.cfg.max_text_chars
        if ctx.chars + len(msg.text) > limit:
            raise P.ProtocolError(P.TEXT_TOO_LONG, f"text rejected: the context would have {ctx.chars + len(msg.text)} "
                                  f"characters; the limit is {limit}", cid)
        buffer = ctx.buffer + msg.text
        frontend_max = self.server.voice.frontend.max_chars
        if len(unicodedata.normalize("NFKC", buffer)) > frontend_max:
            raise P.ProtocolError(P.TEXT_TOO_LONG, f"text rejected: over {frontend_max} characters without a sentence "
                                  "end; send 'flush' or end sentences with punctuation", cid)
        ctx.chars += len(msg.text)
        ctx.buffer = buffer
        n = P.complete_prefix(buffer)
        if n:
            ctx.buffer = buffer[n:]
            self._synthesize(ctx, buffer[:n])

    def _synthesize(self, ctx: _Context, text: str) -> bool:
        """Hand text to the context's stream (created on its first speakable text); False if
        nothing in it is speakable (streamed pieces often are only punctuation)."""
        voice = self.server.voice
        try:
            sentences = voice.frontend.sentences(text)
        except TextError:
            return False
        if ctx.job is None:
            ctx.t_ready = time.perf_counter()
            stream = IncrementalStream(voice, text, self.options)
            ctx.job = Job(stream, ctx, self, self.credits, self.pacing_lead_s)
            self.server.worker.add(ctx.job)
        else:
            ctx.job.stream.add(sentences)
            self._bump(ctx)
        return True

    def _bump(self, ctx: _Context) -> None:
        ctx.job.input_version += 1
        self.server.worker.wake()

    def _release_buffer(self, ctx: _Context) -> None:
        text, ctx.buffer = ctx.buffer, ""
        if text.strip():
            self._synthesize(ctx, text)

    def _flush(self, msg: P.Flush) -> None:
        ctx = self._context(msg.context_id, create=False)
        if ctx is None:  # nothing pending: acknowledge at once
            self.put(_Out("msg", None, P.message("flushed", context_id=msg.context_id, flush_id=msg.flush_id)))
            return
        if not ctx.ended:
            self._release_buffer(ctx)
        if ctx.job is None:
            self.put(_Out("msg", ctx, P.message("flushed", context_id=ctx.id, flush_id=msg.flush_id)))
        else:
            ctx.job.stream.mark_flush(msg.flush_id)
            self._bump(ctx)

    def _end(self, msg: P.End) -> None:
        cid = msg.context_id
        ctx = self._context(cid, create=False)
        if ctx is None:
            raise P.ProtocolError(P.UNKNOWN_CONTEXT, f"no active context {cid!r} (send 'text' first)", cid)
        if ctx.ended:
            raise P.ProtocolError(P.BAD_MESSAGE, f"context {cid!r} has already ended", cid)
        ctx.ended = True
        self._release_buffer(ctx)
        if ctx.job is None:
            self._forget(ctx)
            self.server.metrics.finished("error")
            self.error(P.BAD_TEXT, "the context's text has nothing this voice can speak (no English letters or digits)",
                       cid, ended=True)
            return
        ctx.job.stream.close()
        self._bump(ctx)

    def _cancel(self, cid: str) -> None:
        ctx = self._context(cid, create=False)
        if ctx is not None:
            self._drop(ctx)
            self.server.metrics.finished("cancelled")
        self.put(_Out("msg", None, P.message("cancelled", context_id=cid)))

    def _drop(self, ctx: _Context) -> None:
        ctx.cancelled = True
        self._forget(ctx)
        if ctx.job is not None:
            ctx.job.stream.cancel()
            self.server.worker.wake()

    def busy(self) -> bool:
        """Audio is being made or sent (a context waiting for more text does not count)."""
        return bool(self.outbox) or any(
            c.job is not None and not c.job.finished and c.job.starved_at != c.job.input_version
            for c in self.contexts.values())

    def close(self) -> None:
        """The socket is gone: stop every context (the worker drops them within one step)."""
        for ctx in list(self.contexts.values()):
            self._drop(ctx)
            self.server.metrics.finished("disconnected")


# ----------------------------------------------------------------------------- the server


class TTSServer:
    """``await start()`` then serve until ``await stop()``; ``port`` is the bound port."""

    def __init__(self, config: ServerConfig, voice: Voice | None = None) -> None:
        self.config = config
        if voice is None:
            voice = load_voice(config.voice)
        self.voice = voice
        for name in voice.drafter_names:  # load draft models now, not on the decode thread mid-session
            voice.drafter(name)
        if config.drafter is not None and config.drafter not in voice.drafter_names:
            raise ValueError(f"unknown drafter {config.drafter!r}; choose one of: {', '.join(voice.drafter_names)}")
        self.worker = DecodeWorker(config.send_queue_chunks, self.deliver)
        self.sessions: set[_Session] = set()
        self._server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None
        self._static = {path: (STATIC_DIR / name, ctype) for path, (name, ctype) in STATIC_FILES.items()}
        self.metrics = ServerMetrics()

    # -- lifecycle

    async def start(self) -> None:
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        self.worker.start()
        self._server = await serve(
            self._handle, cfg.host, cfg.port, process_request=self._process_request, compression=None,
            max_size=cfg.max_message_bytes, ping_interval=cfg.ping_interval_s, ping_timeout=cfg.ping_timeout_s,
            logger=log,
        )
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()  # closes open connections with 1001 (going away)
            await self._server.wait_closed()
        self.worker.stop()

    async def __aenter__(self) -> TTSServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def deliver(self, job: Job, item: Any) -> None:
        """Called on the decode thread: hand an item to the job's session on the event loop."""
        try:
            self._loop.call_soon_threadsafe(job.session.on_item, job, item)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    # -- HTTP

    def _http(self, status: int, body: bytes, ctype: str) -> Response:
        headers = Headers([("Content-Type", ctype), ("Content-Length", str(len(body))), ("Connection", "close"),
                           ("Cache-Control", "no-store")])
        return Response(status, HTTPStatus(status).phrase, headers, body)

    def _reject(self, status: int, code: str, text: str) -> Response:
        self.metrics.error(code)
        body = json.dumps({"error": code, "message": text}).encode()
        return self._http(status, body, "application/json")

    def _authorized(self, request: Request, query: dict[str, list[str]]) -> bool:
        key = self.config.api_key
        if key is None:
            return True
        auth = request.headers.get("Authorization", "")
        given = auth[7:] if auth.startswith("Bearer ") else (query.get("api_key") or [""])[0]
        return hmac.compare_digest(given.encode(), key.encode())

    def _origin_ok(self, request: Request) -> bool:
        """Non-browser clients send no Origin; browsers may connect from an allowed origin, or
        from this server's own page when it is addressed by IP or as localhost (a page of some
        other site must not drive the server; a domain name could be DNS-rebound to it, so a
        server behind a name lists that origin in ``allowed_origins``)."""
        origin = request.headers.get("Origin")
        allowed = self.config.allowed_origins
        if origin is None or "*" in allowed or origin in allowed:
            return True
        host = request.headers.get("Host", "")
        if not host or urlsplit(origin).netloc != host:
            return False
        name = urlsplit("//" + host).hostname or ""
        try:
            ipaddress.ip_address(name)
            return True
        except ValueError:
            return name == "localhost"

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        url = urlsplit(request.path)
        query = parse_qs(url.query)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return self._plain_http(url.path, request, query)
        if url.path != WS_PATH:
            return self._reject(404, "not_found", f"the WebSocket endpoint is {WS_PATH}")
        if not self._authorized(request, query):
            return self._reject(401, "unauthorized", "missing or wrong API key (Authorization: Bearer KEY or ?api_key=KEY)")
        if not self._origin_ok(request):
            return self._reject(403, "forbidden_origin", f"origin {request.headers.get('Origin')!r} is not allowed")
        return None

    def _plain_http(self, path: str, request: Request, query: dict[str, list[str]]) -> Response:
        if path == "/healthz":
            body = {"ok": True, "voice": self.voice.name, "sessions": len(self.sessions),
                    "max_sessions": self.config.max_sessions, "protocol": P.VERSION}
            return self._http(200, json.dumps(body).encode(), "application/json")
        if path == "/metrics":
            if not self._authorized(request, query):
                return self._reject(401, "unauthorized", "missing or wrong API key")
            return self._http(200, *self.metrics.exposition())
        if path in self._static:
            file, ctype = self._static[path]
            if file.is_file():
                return self._http(200, file.read_bytes(), f"{ctype}; charset=utf-8")
        return self._reject(404, "not_found", f"no such page {path!r}; try /, /healthz, /metrics or {WS_PATH}")

    # -- WebSocket

    async def _handle(self, ws: ServerConnection) -> None:
        cfg = self.config
        if len(self.sessions) >= cfg.max_sessions:
            self.metrics.error(P.AT_CAPACITY)
            await ws.send(P.error_message(P.AT_CAPACITY, f"the server is at capacity ({cfg.max_sessions} sessions); "
                                          "try again later", fatal=True))
            await ws.close(P.CLOSE_TRY_LATER, "at capacity")
            return
        sock = ws.transport.get_extra_info("socket")
        if cfg.send_buffer_bytes and sock is not None:  # bounds audio parked in the kernel per socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, cfg.send_buffer_bytes)
        session = _Session(self, ws)
        self.sessions.add(session)
        self.metrics.active_sessions.set(len(self.sessions))
        self.metrics.sessions_total.inc()
        sender = asyncio.create_task(session.sender())
        try:
            await self._receive(session, sender)
        except ConnectionClosed:
            pass
        finally:
            session.close()
            sender.cancel()
            self.sessions.discard(session)
            self.metrics.active_sessions.set(len(self.sessions))

    async def _receive(self, session: _Session, sender: asyncio.Task) -> None:
        ws, timeout = session.ws, self.config.inactivity_timeout_s
        idle_since = time.monotonic()
        while True:
            recv = asyncio.ensure_future(ws.recv())
            done, _ = await asyncio.wait({recv, sender}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:  # the sender died (socket closed while sending): stop
                recv.cancel()
                sender.result()
                return
            if recv not in done:
                recv.cancel()
                if session.busy():  # synthesizing or sending: not idle
                    idle_since = time.monotonic()
                    continue
                if time.monotonic() - idle_since >= timeout:
                    session.error(P.INACTIVE, f"no messages for {timeout:g} s; closing", fatal=True)
                    await self._drain(session)
                    await ws.close(P.CLOSE_INACTIVE, "inactivity timeout")
                    return
                continue
            session.handle(recv.result())
            idle_since = time.monotonic()

    async def _drain(self, session: _Session, timeout: float = 2.0) -> None:
        """Let the sender flush what is queued (a final error message) before closing."""
        t = time.monotonic() + timeout
        while session.outbox and time.monotonic() < t:
            await asyncio.sleep(0.01)


async def run_server(config: ServerConfig, ready: Callable[[TTSServer], None] | None = None) -> None:
    """Serve until cancelled (Ctrl-C)."""
    server = TTSServer(config)
    async with server:
        if ready:
            ready(server)
        await asyncio.Future()
