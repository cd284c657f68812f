"""Python client for ``voicespec serve`` (protocol 1.1: :data:`voicespec.serve.protocol.PROTOCOL_VERSION`).

:class:`TTSClient` speaks the protocol (several contexts per socket, binary or base64 audio, every
encoding, word timestamps, per-context options); a :class:`Result` is judged by the listener model
of :mod:`voicespec.serve.playout`, as the benchmarks judge streams::

    async with TTSClient("ws://127.0.0.1:8765/v1/stream") as client:
        await client.start(sample_rate=24000, word_timestamps=True)
        result = await client.synthesize("Hello there.", seed=1)   # options of this context only
        result.pcm, result.sample_rate, result.words, result.stats
        async for item in client.stream("Another one.", speed=1.2):  # audio as it arrives
            ...                                                       # Audio chunks, then messages
"""

from __future__ import annotations

import asyncio
import errno
import io
import itertools
import json
import time
import warnings
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from urllib.parse import urlencode, urlsplit
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from voicespec.serve.playout import gaps, playout
from voicespec.options import SAMPLING_OPTIONS
from voicespec.serve import protocol as P



class ServerError(Exception):
    """An ``error`` message from the server that ended a request, with the errors it sent for that
    request before (``earlier``). Its message and ``code`` are the first one's: the cause, where a
    later one only follows from it (text rejected as too long, then "no text" when the context
    ends); ``fatal`` and ``context_ended`` are the ending one's. ``errors``: all, in order."""

    def __init__(self, msg: dict[str, Any], earlier: Iterable[dict[str, Any]] = ()) -> None:
        self.errors: list[dict[str, Any]] = [*earlier, msg]
        first = self.errors[0]
        super().__init__(f"{first.get('code')}: {first.get('message')}")
        self.code: str = first.get("code", "")
        self.context_id: str | None = msg.get("context_id")
        self.fatal: bool = bool(msg.get("fatal"))
        self.context_ended: bool = bool(msg.get("context_ended"))


@dataclass
class Audio:
    context_id: str
    seq: int
    pcm: np.ndarray  # float32 in [-1, 1] (empty for opus: its pages decode as a whole, see Result.pcm)
    payload: bytes = field(repr=False)  # as sent, in the session's encoding
    t: float = 0.0  # time.perf_counter() at arrival


@dataclass
class Result:
    """One context, received in full."""

    context_id: str
    pcm: np.ndarray
    payload: bytes
    sample_rate: int
    stats: dict[str, Any] | None  # the server's `done` stats (None if cancelled)
    t_sent: float  # perf_counter when its first text was sent
    arrivals: list[tuple[float, int]]  # (seconds since t_sent, samples)
    cancelled: bool = False
    errors: list[dict[str, Any]] = field(default_factory=list)  # rejected messages (the context went on)
    words: list[dict[str, Any]] = field(default_factory=list)  # {"text", "start_s", "end_s"} (word_timestamps)
    phonemes: list[dict[str, Any]] = field(default_factory=list)  # the same per phoneme (phoneme_timestamps)

    @property
    def ttfa_s(self) -> float | None:
        return self.arrivals[0][0] if self.arrivals else None

    def playout(self, prebuffer_s: float) -> dict[str, Any]:
        return playout(self.arrivals, self.sample_rate, prebuffer_s)


_END = object()
CONNECT_RETRY_S = 0.25  # between attempts while a server is not up yet


def is_refused(e: OSError) -> bool:
    """Whether the connection was refused: nothing listens there (yet). A name with several
    addresses (``localhost``) fails as one errno-less OSError joining theirs: refused if one was."""
    return (isinstance(e, ConnectionRefusedError) or e.errno == errno.ECONNREFUSED
            or (str(e).startswith("Multiple exceptions:") and f"[Errno {errno.ECONNREFUSED}]" in str(e)))


class TTSClient:
    """``async with TTSClient(url, api_key=...) as c: await c.start(sample_rate=16000); r = await c.synthesize("Hi.")``

    ``api_key`` goes in the ``Authorization`` header; ``token`` (from ``GET /v1/token``) in the URL.
    ``wait_s``: how long to keep retrying while the connection is refused (a server still starting)."""

    def __init__(self, url: str = P.DEFAULT_URL, api_key: str | None = None, origin: str | None = None,
                 open_timeout: float = 10.0, token: str | None = None, wait_s: float = 0.0) -> None:
        if token is not None:
            url += ("&" if urlsplit(url).query else "?") + urlencode({"token": token})
        self.url, self.api_key, self.origin, self.open_timeout = url, api_key, origin, open_timeout
        self.wait_s = wait_s
        self.ws: ClientConnection | None = None
        self.ready: dict[str, Any] | None = None
        self.fatal: dict[str, Any] | None = None  # the server's fatal error, if it sent one before closing
        self._queues: dict[str | None, asyncio.Queue] = defaultdict(asyncio.Queue)
        self._reader: asyncio.Task | None = None
        self._closed = False
        self._ids = itertools.count()

    async def __aenter__(self) -> TTSClient:
        self.ws = await self._connect()
        self._reader = asyncio.create_task(self._read())
        return self

    async def _connect(self) -> ClientConnection:
        """Open the socket, retrying for up to ``wait_s`` while nothing listens there yet: a
        server started a moment ago (``voicespec serve &``) loads its voice before it listens."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                return await connect(self.url, additional_headers=headers, origin=self.origin, max_size=None,
                                     compression=None, open_timeout=self.open_timeout)
            except OSError as e:
                left = deadline - time.monotonic()
                if not is_refused(e) or left <= 0:
                    raise
                await asyncio.sleep(min(CONNECT_RETRY_S, left))

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def _read(self) -> None:
        """Route every server message to the queue of its context (None: connection-level)."""
        try:
            async for raw in self.ws:
                t = time.perf_counter()
                if isinstance(raw, bytes):
                    self._audio(P.decode_frame(raw, self.ready["encoding"]), t)
                    continue
                msg = json.loads(raw)
                if msg["type"] == "error" and msg.get("fatal"):
                    self.fatal = msg  # why the connection is about to close
                if msg["type"] == "audio":
                    self._audio(P.decode_audio_message(msg, self.ready["encoding"]), t)
                else:
                    self._queues[msg.get("context_id")].put_nowait(msg)
        finally:
            self._closed = True
            for q in list(self._queues.values()):
                q.put_nowait(_END)

    def _audio(self, frame: P.AudioFrame, t: float) -> None:
        pcm = decode_payload(frame.payload, self.ready["encoding"])
        self._queues[frame.context_id].put_nowait(Audio(frame.context_id, frame.seq, pcm, frame.payload, t))

    async def send(self, kind: str, **fields: Any) -> None:
        await self.ws.send(json.dumps({"type": kind, **{k: v for k, v in fields.items() if v is not None}}))

    async def next_event(self, context_id: str | None = None, timeout: float | None = None) -> Any:
        """The next message for a context (an :class:`Audio`, or a server message dict); raises
        ConnectionError if the socket closed first."""
        q = self._queues[context_id]
        if self._closed and q.empty():
            q.put_nowait(_END)
        item = await asyncio.wait_for(q.get(), timeout)
        if item is _END:
            q.put_nowait(_END)
            code = self.ws.close_code if self.ws else None
            why = f"; {self.fatal['code']}: {self.fatal['message']}" if self.fatal else ""
            raise ConnectionError(f"connection closed (code {code}: {self.ws.close_reason if self.ws else ''}){why}")
        return item

    async def start(self, **options: Any) -> dict[str, Any]:
        """Send ``start`` (protocol field names); return the ``ready`` message."""
        await self.send("start", **options)
        msg = await self.next_event(None)
        if msg.get("type") == "error":
            raise ServerError(msg)
        self.ready = msg
        return msg

    async def events(self, context_id: str) -> AsyncIterator[Any]:
        """Audio and messages of one context until its ``done``, ``cancelled`` or ending error."""
        while True:
            item = await self.next_event(context_id)
            yield item
            if isinstance(item, dict) and (item["type"] in ("done", "cancelled")
                                           or (item["type"] == "error" and item.get("context_ended"))):
                return

    async def _send_text(self, text: str | Iterable[str], context_id: str | None, options: dict[str, Any]) -> str:
        cid = context_id or f"ctx-{next(self._ids)}"
        pieces = [text] if isinstance(text, str) else list(text)
        for i, piece in enumerate(pieces):
            await self.send("text", context_id=cid, text=piece, **(options if i == 0 else {}))
        await self.send("end", context_id=cid)
        return cid

    async def synthesize(self, text: str | Iterable[str], context_id: str | None = None, **options: Any) -> Result:
        """Send the text (a string, or pieces sent as separate ``text`` messages), end the context
        and collect its audio, checking order (seq 0, 1, 2, ...). ``options``: this context's own
        ``voice``, ``speed``, ``seed`` and sampling fields (protocol 1.1)."""
        t0 = time.perf_counter()
        return await self.collect(await self._send_text(text, context_id, options), t0)

    async def stream(self, text: str | Iterable[str], context_id: str | None = None, **options: Any) -> AsyncIterator[Any]:
        """Like :meth:`synthesize`, but yield each :class:`Audio` chunk and server message of the
        context as it arrives (ending with ``done``, ``cancelled`` or an ending error)."""
        async for item in self.events(await self._send_text(text, context_id, options)):
            yield item

    async def collect(self, context_id: str, t0: float) -> Result:
        chunks: list[Audio] = []
        stats, cancelled, errors, words, phonemes = None, False, [], [], []
        async for item in self.events(context_id):
            if isinstance(item, Audio):
                if item.seq != len(chunks):
                    raise RuntimeError(f"context {context_id}: audio seq {item.seq} where {len(chunks)} was due")
                chunks.append(item)
            elif item["type"] == "error":
                if item.get("context_ended"):
                    raise ServerError(item, errors)
                errors.append(item)
            elif item["type"] == "timestamps":
                words += item.get("words", [])
                phonemes += item.get("phonemes", [])
            elif item["type"] == "done":
                stats = item["stats"]
            elif item["type"] == "cancelled":
                cancelled = True
        payload = b"".join(c.payload for c in chunks)
        if self.ready["encoding"] == "opus":
            pcm = decode_opus(payload) if payload else np.zeros(0, np.float32)
            per_byte = len(pcm) / max(1, len(payload))  # pages carry no sample count: audio by share of the bytes
            arrivals = [(c.t - t0, round(len(c.payload) * per_byte)) for c in chunks]
        else:
            pcm = np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)
            arrivals = [(c.t - t0, c.pcm.size) for c in chunks]
        return Result(context_id, pcm, payload, self.ready["sample_rate"], stats, t0, arrivals, cancelled, errors,
                      words, phonemes)


def decode_payload(payload: bytes, encoding: str) -> np.ndarray:
    """A sample-wise payload as float32 PCM in [-1, 1] (opus: empty; see :func:`decode_opus`)."""
    if encoding == "f32le":
        return np.frombuffer(payload, "<f4").astype(np.float32)
    if encoding in ("mulaw", "alaw"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            import audioop
        payload = (audioop.ulaw2lin if encoding == "mulaw" else audioop.alaw2lin)(payload, 2)
    elif encoding == "opus":
        return np.zeros(0, np.float32)
    return np.frombuffer(payload, "<i2").astype(np.float32) / 32767.0


def decode_opus(stream: bytes) -> np.ndarray:
    """A whole Ogg Opus stream to float32 PCM at the rate it was encoded at (libsndfile)."""
    import soundfile as sf

    return sf.read(io.BytesIO(stream), dtype="float32")[0]


# ----------------------------------------------------------------------------- command line


def _pieces(text: str, words: int) -> list[str]:
    if words <= 0:
        return [text]
    w = text.split(" ")
    return [" ".join(w[i:i + words]) + (" " if i + words < len(w) else "") for i in range(0, len(w), words)]


async def run_client(args: Any, text: str) -> dict[str, Any]:
    """Speak ``text`` through the server at ``args.url`` (``voicespec client``'s flags); the
    audio (``pcm`` at ``sample_rate``) and the figures :func:`summary_line` reports. A request the
    server rejected any of (a text too long, ...) raises :class:`ServerError`, naming the first
    error, not a later one that only follows from it."""
    options = dict(voice=args.voice, sample_rate=args.sample_rate, encoding=args.encoding, drafter=args.drafter,
                   gamma=args.gamma, latency_budget_ms=args.latency_budget_ms, seed=args.seed, speed=args.speed,
                   word_timestamps=args.word_timestamps or None,
                   **{o.name: getattr(args, o.name) for o in SAMPLING_OPTIONS})
    async with TTSClient(args.url, api_key=args.api_key, token=args.token, wait_s=args.wait_s) as client:
        await client.start(**options)
        result = await client.synthesize(_pieces(text, args.words_per_message))
        play = result.playout(args.prebuffer_ms / 1000)
        await client.send("stats", context_id=result.context_id, underruns=play["underruns"],
                          underrun_ms=play["stall_s"] * 1000)
    if result.errors:  # some of its text was rejected: the audio would silently lack it
        raise ServerError(result.errors[-1], result.errors[:-1])
    g = gaps([t for t, _ in result.arrivals])
    return {"ttfa_s": result.ttfa_s, "chunks": len(result.arrivals), "max_gap_s": max(g, default=0.0),
            "playout": play, "server": result.stats, "sample_rate": result.sample_rate, "words": result.words,
            "pcm": result.pcm}


def summary_line(r: dict[str, Any], prebuffer_ms: float) -> str:
    p, s = r["playout"], r["server"] or {}
    ttfa = "n/a" if r["ttfa_s"] is None else f"{r['ttfa_s'] * 1000:.0f} ms"
    return (f"TTFA {ttfa}  audio {p['audio_s']:.2f}s  chunks {r['chunks']}  max gap {r['max_gap_s'] * 1000:.0f} ms  "
            f"underruns {p['underruns']} (stall {p['stall_s'] * 1000:.0f} ms, prebuffer {prebuffer_ms:g} ms)  "
            f"server RTF {s.get('rtf')}  acceptance {s.get('acceptance')}  "
            f"mean accepted length {s.get('mean_accepted_length')}"
            + "".join(f"\n  {w['start_s']:7.3f} {w['end_s']:7.3f}  {w['text']}" for w in r.get("words", [])))
