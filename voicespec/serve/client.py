"""Python client for ``voicespec serve`` (protocol v1).

:class:`TTSClient` speaks the protocol (several contexts per socket, binary or base64 audio); a
:class:`Result` is judged by the listener model of :mod:`voicespec.serve.playout`, as the
benchmarks judge streams.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from websockets.asyncio.client import ClientConnection, connect

from voicespec.serve.playout import gaps, playout
from voicespec.options import SAMPLING_OPTIONS
from voicespec.serve import protocol as P



class ServerError(Exception):
    """An ``error`` message from the server."""

    def __init__(self, msg: dict[str, Any]) -> None:
        super().__init__(f"{msg.get('code')}: {msg.get('message')}")
        self.code: str = msg.get("code", "")
        self.context_id: str | None = msg.get("context_id")
        self.fatal: bool = bool(msg.get("fatal"))
        self.context_ended: bool = bool(msg.get("context_ended"))


@dataclass
class Audio:
    context_id: str
    seq: int
    pcm: np.ndarray  # float32 in [-1, 1]
    payload: bytes = field(repr=False)  # as sent (pcm_s16le or f32le bytes)
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

    @property
    def ttfa_s(self) -> float | None:
        return self.arrivals[0][0] if self.arrivals else None

    def playout(self, prebuffer_s: float) -> dict[str, Any]:
        return playout(self.arrivals, self.sample_rate, prebuffer_s)


_END = object()


class TTSClient:
    """``async with TTSClient(url, api_key=...) as c: await c.start(sample_rate=16000); r = await c.synthesize("Hi.")``"""

    def __init__(self, url: str = P.DEFAULT_URL, api_key: str | None = None, origin: str | None = None,
                 open_timeout: float = 10.0) -> None:
        self.url, self.api_key, self.origin, self.open_timeout = url, api_key, origin, open_timeout
        self.ws: ClientConnection | None = None
        self.ready: dict[str, Any] | None = None
        self._queues: dict[str | None, asyncio.Queue] = defaultdict(asyncio.Queue)
        self._reader: asyncio.Task | None = None
        self._closed = False
        self._ids = itertools.count()

    async def __aenter__(self) -> TTSClient:
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        self.ws = await connect(self.url, additional_headers=headers, origin=self.origin, max_size=None,
                                compression=None, open_timeout=self.open_timeout)
        self._reader = asyncio.create_task(self._read())
        return self

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
                if msg["type"] == "audio":
                    self._audio(P.decode_audio_message(msg, self.ready["encoding"]), t)
                else:
                    self._queues[msg.get("context_id")].put_nowait(msg)
        finally:
            self._closed = True
            for q in list(self._queues.values()):
                q.put_nowait(_END)

    def _audio(self, frame: P.AudioFrame, t: float) -> None:
        enc = self.ready["encoding"]
        raw = np.frombuffer(frame.payload, "<i2" if enc == "pcm_s16le" else "<f4")
        pcm = raw.astype(np.float32) / 32767.0 if enc == "pcm_s16le" else raw.astype(np.float32)
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
            raise ConnectionError(f"connection closed (code {code}: {self.ws.close_reason if self.ws else ''})")
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

    async def synthesize(self, text: str | Iterable[str], context_id: str | None = None) -> Result:
        """Send the text (a string, or pieces sent as separate ``text`` messages), end the context
        and collect its audio, checking order (seq 0, 1, 2, ...)."""
        cid = context_id or f"ctx-{next(self._ids)}"
        pieces = [text] if isinstance(text, str) else list(text)
        t0 = time.perf_counter()
        for piece in pieces:
            await self.send("text", context_id=cid, text=piece)
        await self.send("end", context_id=cid)
        return await self.collect(cid, t0)

    async def collect(self, context_id: str, t0: float) -> Result:
        chunks: list[Audio] = []
        stats, cancelled, errors = None, False, []
        async for item in self.events(context_id):
            if isinstance(item, Audio):
                if item.seq != len(chunks):
                    raise RuntimeError(f"context {context_id}: audio seq {item.seq} where {len(chunks)} was due")
                chunks.append(item)
            elif item["type"] == "error":
                if item.get("context_ended"):
                    raise ServerError(item)
                errors.append(item)
            elif item["type"] == "done":
                stats = item["stats"]
            elif item["type"] == "cancelled":
                cancelled = True
        pcm = np.concatenate([c.pcm for c in chunks]) if chunks else np.zeros(0, np.float32)
        return Result(context_id, pcm, b"".join(c.payload for c in chunks), self.ready["sample_rate"], stats, t0,
                      [(c.t - t0, c.pcm.size) for c in chunks], cancelled, errors)


# ----------------------------------------------------------------------------- command line


def _pieces(text: str, words: int) -> list[str]:
    if words <= 0:
        return [text]
    w = text.split(" ")
    return [" ".join(w[i:i + words]) + (" " if i + words < len(w) else "") for i in range(0, len(w), words)]


async def run_client(args: Any) -> dict[str, Any]:
    from voicespec.audio import check_audio_path, write_audio_atomic

    check_audio_path(args.output)
    options = dict(voice=args.voice, sample_rate=args.sample_rate, encoding=args.encoding, drafter=args.drafter,
                   gamma=args.gamma, latency_budget_ms=args.latency_budget_ms, seed=args.seed,
                   **{o.name: getattr(args, o.name) for o in SAMPLING_OPTIONS})
    async with TTSClient(args.url, api_key=args.api_key) as client:
        await client.start(**options)
        result = await client.synthesize(_pieces(args.text, args.words_per_message))
        play = result.playout(args.prebuffer_ms / 1000)
        await client.send("stats", context_id=result.context_id, underruns=play["underruns"],
                          underrun_ms=play["stall_s"] * 1000)
    write_audio_atomic(args.output, result.pcm, result.sample_rate)
    g = gaps([t for t, _ in result.arrivals])
    return {"ttfa_s": result.ttfa_s, "chunks": len(result.arrivals), "max_gap_s": max(g, default=0.0),
            "playout": play, "server": result.stats, "sample_rate": result.sample_rate}


def summary_line(r: dict[str, Any], prebuffer_ms: float) -> str:
    p, s = r["playout"], r["server"] or {}
    ttfa = "n/a" if r["ttfa_s"] is None else f"{r['ttfa_s'] * 1000:.0f} ms"
    return (f"TTFA {ttfa}  audio {p['audio_s']:.2f}s  chunks {r['chunks']}  max gap {r['max_gap_s'] * 1000:.0f} ms  "
            f"underruns {p['underruns']} (stall {p['stall_s'] * 1000:.0f} ms, prebuffer {prebuffer_ms:g} ms)  "
            f"server RTF {s.get('rtf')}  acceptance {s.get('acceptance')}  "
            f"mean accepted length {s.get('mean_accepted_length')}")
