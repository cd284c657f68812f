"""``voicespec serve``: streaming TTS over WebSockets (protocol v1.1, see ``serve/static/PROTOCOL.md``).

One asyncio event loop owns every socket; the model runs on the decode worker thread of
``scheduler.py``, which steps the active contexts round-robin, one audio chunk at a time. So many
sessions interleave at decode-step granularity, a cancel takes effect within one decode step,
and the event loop never waits on the model. Each connection has a bounded number of audio
chunks in flight: when a client reads slowly its contexts are skipped by the worker until it
catches up, so a slow reader slows only itself. Plain HTTP on the same port serves ``/healthz``,
``/metrics`` and the browser player (``/``).

This module is the lifecycle only: it loads the default voice (others load on first use,
``voices.py``), binds the port, admits connections up to
``max_sessions`` and bridges the worker thread to the loop. The protocol per connection is
``session.py``, the HTTP side ``http.py``, the settings ``config.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.asyncio.server import Server, ServerConnection, serve

from voicespec.pipeline.frame_cache import FrameCache
from voicespec.pipeline.voice import Voice, load_voice, voice_names
from voicespec.threads import use_threads
from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.heap import give_back_freed_memory
from voicespec.serve.http import HttpConnection, HttpFront
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.scheduler import DecodeWorker, Job, places_full
from voicespec.serve.session import Session
from voicespec.serve.text_reader import TextReader
from voicespec.serve.voices import VoiceSet


log = logging.getLogger("voicespec.server")


class TTSServer:
    """``await start()`` then serve until ``await stop()``; ``port`` is the bound port."""

    def __init__(self, config: ServerConfig, voice: Voice | None = None) -> None:
        self.config = config
        use_threads(config.threads)  # the model thread's and the audio worker's intra-op threads
        give_back_freed_memory()  # a burst of sessions must not leave RSS at its high-water mark
        self.text_reader = TextReader(config.text_processes)  # before any voice is prepared (_prepare warms it there)
        lent = voice is not None  # a lent voice keeps its own frame cache (or none); the others share the server's
        if voice is None:
            voice = load_voice(config.voice, config.device, config.dtype)
        self.frame_cache = voice.frame_cache if lent else (
            FrameCache(int(config.frame_cache_mb * 2**20)) if config.frame_cache_mb else None)
        self.metrics = ServerMetrics()
        if self.frame_cache is not None:
            self.metrics.watch_frame_cache(self.frame_cache)
        names = voice_names() if config.voices is None else list(config.voices)
        self.voices = VoiceSet(voice, names, lambda name: load_voice(name, config.device, config.dtype), self._prepare,
                               aliases=[a for a in (config.voice, Path(config.voice or "").name) if a])
        self.voice = voice
        if config.drafter is not None and config.drafter not in voice.drafter_names:
            self.text_reader.close()
            raise ValueError(f"unknown drafter {config.drafter!r}; choose one of: {', '.join(voice.drafter_names)}")
        self.worker = DecodeWorker(config.send_queue_chunks, self.deliver, config.max_tick_contexts, config.max_tick_prefill,
                                   config.max_spec_contexts, config.max_decoding_contexts, config.max_waiting_contexts)
        self.metrics.watch_worker(self.worker)
        self.sessions: set[Session] = set()
        self._server: Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port: int | None = None
        self.http = HttpFront(config, self.metrics, self.voices, self.sessions)
        self.openai: Any = None  # the OpenAI door (openai_http.OpenAIFront), when config.openai_port is set
        self.openai_port: int | None = None
        self._openai_runner: Any = None
        self.wyoming: Any = None  # the Wyoming door (wyoming_door.WyomingDoor), when config.wyoming_port is set
        self.wyoming_port: int | None = None
        self._wyoming_server: asyncio.Server | None = None

    def _prepare(self, voice: Voice) -> None:
        """Ready a voice for serving: its draft models loaded now, not on the decode thread
        mid-session; its front end's models too (the first sentence would pay them); the server's
        frame cache (keyed by target, so voices can share it)."""
        for name in voice.drafter_names:
            voice.drafter(name)
        voice.script("Ready, Okafor.")  # a known and an unknown word: lexicon, tagger and G2P
        self.text_reader.warm(voice)  # the voice loaded in the text workers too
        if voice.frame_cache is None:
            voice.frame_cache = self.frame_cache

    async def start(self) -> None:
        cfg = self.config
        self._loop = asyncio.get_running_loop()
        self.worker.start()
        self._server = await serve(
            self._handle, cfg.host, cfg.port, process_request=self.http.process_request,
            create_connection=HttpConnection, compression=None,
            max_size=cfg.max_message_bytes, ping_interval=cfg.ping_interval_s, ping_timeout=cfg.ping_timeout_s,
            logger=log,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        if cfg.openai_port is not None:
            await self._start_openai(cfg)
        if cfg.wyoming_port is not None:
            await self._start_wyoming(cfg)

    async def _start_openai(self, cfg: ServerConfig) -> None:
        from aiohttp import web

        from voicespec.serve.openai_http import OpenAIFront

        self.openai = OpenAIFront(cfg, self.voices, self.metrics, self.worker, self.refusal, self.text_reader)
        self._openai_runner = web.AppRunner(self.openai.app(), access_log=None, handle_signals=False)
        await self._openai_runner.setup()
        site = web.TCPSite(self._openai_runner, cfg.host, cfg.openai_port)
        await site.start()
        self.openai_port = self._openai_runner.addresses[0][1]

    async def _start_wyoming(self, cfg: ServerConfig) -> None:
        from voicespec.serve.wyoming_door import WyomingDoor

        self.wyoming = WyomingDoor(cfg, self.voices, self.metrics, self.worker, self.refusal, self.text_reader)
        self._wyoming_server = await asyncio.start_server(lambda r, w: self.wyoming.handler(r, w).run(),
                                                          cfg.host, cfg.wyoming_port)
        self.wyoming_port = self._wyoming_server.sockets[0].getsockname()[1]

    def refusal(self) -> str | None:
        """Why one more session or request does not fit now (None: it does): ``max_sessions``
        (every door counts), or ``max_waiting_contexts`` newcomers already waiting for a place
        (as of the decode worker's last look)."""
        cfg = self.config
        busy = len(self.sessions) + sum(len(door.active) for door in (self.openai, self.wyoming) if door is not None)
        if busy >= cfg.max_sessions:
            return f"the server is at capacity ({cfg.max_sessions} sessions); try again later"
        if cfg.max_waiting_contexts is not None and self.worker.free == 0 and self.worker.held >= cfg.max_waiting_contexts:
            return places_full(cfg.max_decoding_contexts, self.worker.held)
        return None

    async def stop(self) -> None:
        if self._wyoming_server is not None:
            self._wyoming_server.close()
        if self._openai_runner is not None:
            await self._openai_runner.cleanup()
        if self._server is not None:
            self._server.close()  # closes open connections with 1001 (going away)
            await self._server.wait_closed()
        self.worker.stop()
        await asyncio.to_thread(self.text_reader.close)

    async def __aenter__(self) -> TTSServer:
        try:
            await self.start()
        except BaseException:
            await asyncio.to_thread(self.text_reader.close)  # no text worker outlives a server that did not start
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def deliver(self, job: Job, item: Any) -> None:
        """Called on the decode thread: hand an item to the job's session on the event loop."""
        try:
            self._loop.call_soon_threadsafe(job.session.on_item, job, item)
        except RuntimeError:  # the loop is closed: shutting down
            pass

    async def _handle(self, ws: ServerConnection) -> None:
        cfg = self.config
        if (why := self.refusal()) is not None:
            self.metrics.error(P.AT_CAPACITY)
            await ws.send(P.error_message(P.AT_CAPACITY, why, fatal=True))
            await ws.close(P.CLOSE_TRY_LATER, "at capacity")
            return
        address = (ws.remote_address or ("?",))[0]
        if cfg.max_sessions_per_address is not None and \
                sum(s.address == address for s in self.sessions) >= cfg.max_sessions_per_address:
            self.metrics.error(P.TOO_MANY_FROM_ADDRESS)
            await ws.send(P.error_message(P.TOO_MANY_FROM_ADDRESS, f"this address holds {cfg.max_sessions_per_address} "
                                          "sessions already; close one first", fatal=True))
            await ws.close(P.CLOSE_TRY_LATER, "too many sessions from this address")
            return
        sock = ws.transport.get_extra_info("socket")
        if cfg.send_buffer_bytes and sock is not None:  # bounds audio parked in the kernel per socket
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, cfg.send_buffer_bytes)
        session = Session(ws, cfg, self.voices, self.metrics, self.worker, address, self.text_reader)
        self.sessions.add(session)
        self.metrics.active_sessions.set(len(self.sessions))
        self.metrics.sessions_total.inc()
        try:
            await session.serve()
        finally:
            self.sessions.discard(session)
            self.metrics.active_sessions.set(len(self.sessions))


@contextmanager
def server_thread(config: ServerConfig, voice: Voice | None = None) -> Iterator[TTSServer]:
    """A started TTSServer on a thread of its own, with its own event loop (as in production it has
    the process): for benchmarks and tests that drive it from another loop. Stopped on exit."""
    server = TTSServer(config, voice)
    loop = asyncio.new_event_loop()
    started, failure, stop = threading.Event(), [], []

    async def main() -> None:
        stop.append(asyncio.Event())
        try:
            async with server:
                started.set()
                await stop[0].wait()
        except BaseException as e:  # start-up failed: re-raised on the caller's thread
            failure.append(e)
            started.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not started.wait(60) or failure:
        raise RuntimeError("the server did not start") from (failure[0] if failure else None)
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(stop[0].set)
        thread.join(30)
        loop.close()


async def run_server(config: ServerConfig, ready: Callable[[TTSServer], None] | None = None) -> None:
    """Serve until cancelled (Ctrl-C) or sent SIGTERM (what a service manager or a container's stop
    sends): either way the server stops as :meth:`TTSServer.stop` says, its text workers with it."""
    server = TTSServer(config)
    stopping = asyncio.Event()
    with contextlib.suppress(NotImplementedError, RuntimeError):  # no signal handlers off the main thread or on Windows
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
    async with server:
        if ready:
            ready(server)
        await stopping.wait()
