"""A WebSocket connection's incoming side: its messages, read one at a time and handled in order,
and the two deadlines that end a client that does nothing: no ``start`` within
``start_timeout_s``, and no message for ``inactivity_timeout_s`` while nothing is being
synthesized or sent for it. A client given up on is told why, then closed without waiting for its
closing handshake: one that never answers would otherwise hold its session slot for websockets'
close timeout (10 s) after the server has given up on it (issue 39)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from websockets.asyncio.server import ServerConnection

from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.outbox import Outbox


class Reader:
    """``run(handle, started, busy)``: ``handle(raw)`` each message; ``started()``: the client
    has sent ``start``; ``busy()``: audio is being made or sent for it (it is not idle)."""

    def __init__(self, ws: ServerConnection, config: ServerConfig, outbox: Outbox) -> None:
        self.ws = ws
        self.cfg = config
        self.out = outbox
        self.closer: asyncio.Future | None = None  # the close of a client given up on, kept referenced

    async def run(self, sender: asyncio.Task, handle: Callable[[str | bytes], Awaitable[None]],
                  started: Callable[[], bool], busy: Callable[[], bool]) -> None:
        """Until the socket closes, the sender dies (the socket closed while sending) or a deadline passes."""
        ws, timeout, start_s = self.ws, self.cfg.inactivity_timeout_s, self.cfg.start_timeout_s
        idle_since = opened = time.monotonic()
        while True:
            recv = asyncio.ensure_future(ws.recv())
            wait = timeout if started() else min(timeout, max(0.0, opened + start_s - time.monotonic()))
            done, _ = await asyncio.wait({recv, sender}, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
            if sender in done:
                recv.cancel()
                sender.result()
                return
            if recv not in done:
                recv.cancel()
                if not started() and time.monotonic() - opened >= start_s:
                    await self.hang_up(f"no 'start' within {start_s:g} s; closing", "no start")
                    return
                if busy():  # synthesizing or sending: not idle
                    idle_since = time.monotonic()
                elif time.monotonic() - idle_since >= timeout:
                    await self.hang_up(f"no messages for {timeout:g} s; closing", "inactivity timeout")
                    return
                continue
            await handle(recv.result())
            idle_since = time.monotonic()

    async def hang_up(self, text: str, reason: str) -> None:
        self.out.error(P.INACTIVE, text, fatal=True)
        await self.out.drain()
        self.closer = asyncio.ensure_future(self.ws.close(P.CLOSE_INACTIVE, reason))
