"""The hostile side of ``voicespec stress``: each phase's load, run in a process of its own.

An attacker is another process: run in the server's process, the load's Python would hold the
server's GIL and its event loop would compete with the server's, so the figures would measure
the harness as much as the server (issue 39's probe ran outside). This module imports no torch,
so the child starts in a fraction of a second; it prints the closes it saw (code, whether an
error frame came first) as JSON for the parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from voicespec.bench.hostile import hostile_messages
from voicespec.serve.client import TTSClient

DIGIT_FLOOD = "1" * 4300 + "."  # issue 39: 17,200 characters a second at one every 0.25 s, under the 20,000 budget
LONG_TEXT = "This context has a long story to tell, sentence after sentence. " * 12
DROP_TEXT = "This one is left behind. " * 4
STORM_BURST = 50  # drops that start together: each new session's first audio waits for those ahead of it
Closes = list[tuple[int | None, bool]]  # (close code, whether an error frame came before it)


async def _hostile(url: str, messages: list[str | bytes], closes: Closes) -> None:
    """Send ``messages`` in order, reconnecting whenever the server closes the socket."""
    i = 0
    while i < len(messages):
        last: dict | None = None
        try:
            async with connect(url, max_size=None) as ws:
                async def reader() -> None:
                    nonlocal last
                    with contextlib.suppress(ConnectionClosed):
                        async for m in ws:
                            if isinstance(m, str):
                                with contextlib.suppress(ValueError):
                                    last = json.loads(m)

                task = asyncio.create_task(reader())
                with contextlib.suppress(ConnectionClosed):
                    while i < len(messages):
                        await ws.send(messages[i])
                        i += 1
                        if i % 50 == 0:
                            await asyncio.sleep(0)
                    await asyncio.sleep(0.05)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                if ws.close_code is not None:
                    closes.append((ws.close_code, bool(last and last.get("type") == "error")))
        except (OSError, ConnectionClosed):
            await asyncio.sleep(0.05)


async def _started(url: str, **start: Any) -> Any:
    ws = await connect(url, max_size=None)
    await ws.send(json.dumps({"type": "start", **start}))
    await ws.recv()
    return ws


async def _drop(url: str, i: int) -> None:
    """A session that leaves mid-stream, after its first audio: odd ones reset, even ones close."""
    ws = await _started(url, seed=i, gamma=0)
    await ws.send(json.dumps({"type": "text", "context_id": "x", "text": DROP_TEXT}))
    await ws.send(json.dumps({"type": "end", "context_id": "x"}))
    async with asyncio.timeout(60):
        while isinstance(m := await ws.recv(), str):  # until the first audio frame (or the context's end)
            if json.loads(m).get("type") in ("done", "error"):
                break
    if i % 2:
        ws.transport.abort()  # a reset: no close frame
    await ws.close()


async def _sessions(port: int) -> int:
    """Open sessions, as ``/healthz`` says."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
    body = (await reader.read()).split(b"\r\n\r\n", 1)[1]
    writer.close()
    return json.loads(body)["sessions"]


async def _storm(url: str, port: int, disconnects: int) -> None:
    for start in range(0, disconnects, STORM_BURST):
        await asyncio.gather(*(_drop(url, i) for i in range(start, min(start + STORM_BURST, disconnects))))
        for _ in range(1000):  # the server notices the drops on its own loop: let it (10 s at most)
            if await _sessions(port) <= 2:  # the good session's and the TTFA probe's
                break
            await asyncio.sleep(0.01)


async def _drain(ws: Any) -> None:
    with contextlib.suppress(ConnectionClosed):
        async for _ in ws:
            pass


async def _digit_flood(url: str, seconds: float) -> None:
    """One socket, within every budget: a 4,300-digit text every 0.25 s, then its end and cancel."""
    ws, n = await _started(url, seed=0), 0
    t = asyncio.get_running_loop().time()
    drain = asyncio.create_task(_drain(ws))
    while asyncio.get_running_loop().time() - t < seconds:
        for kind, extra in (("text", {"text": DIGIT_FLOOD}), ("end", {}), ("cancel", {})):
            await ws.send(json.dumps({"type": kind, "context_id": f"d{n}", **extra}))
        n += 1
        await asyncio.sleep(0.25)
    drain.cancel()
    await ws.close()


async def _contexts_flood(url: str, seconds: float, contexts: int) -> None:
    """One socket keeping ``contexts`` long contexts going (each ended, the next begun on its done)."""
    ws, clock = await _started(url, seed=0), asyncio.get_running_loop().time
    t = clock()

    async def begin(n: int) -> None:
        await ws.send(json.dumps({"type": "text", "context_id": f"c{n}", "text": LONG_TEXT}))
        await ws.send(json.dumps({"type": "end", "context_id": f"c{n}"}))

    for n in range(contexts):
        await begin(n)
    n = contexts
    with contextlib.suppress(ConnectionClosed):
        while clock() - t < seconds:
            try:
                m = await asyncio.wait_for(ws.recv(), max(0.01, seconds - (clock() - t)))
            except asyncio.TimeoutError:
                break
            if isinstance(m, str) and json.loads(m).get("type") in ("done", "error"):
                await begin(n)
                n += 1
    await ws.close()


async def _soak(url: str, seconds: float) -> None:
    """One well-behaved client speaking sentence after sentence for ``seconds``."""
    clock = asyncio.get_running_loop().time
    t = clock()
    while clock() - t < seconds:
        async with TTSClient(url) as c:
            await c.start(seed=0)
            await c.synthesize(LONG_TEXT[:200])


async def run_load(phase: str, url: str, port: int, config: dict[str, Any]) -> Closes:
    """One phase's load to its end (``config``: a :class:`StressConfig`'s fields, as a dict, so the
    child never imports the server's side)."""
    closes: Closes = []
    if phase == "fuzz":
        messages = list(hostile_messages(config["messages"], config["seed"]))
        await asyncio.gather(*(_hostile(url, messages[k::config["sockets"]], closes) for k in range(config["sockets"])))
    elif phase == "disconnects":
        await _storm(url, port, config["disconnects"])
    elif phase == "cpu":
        await _digit_flood(url, config["flood_s"])
    elif phase == "contexts":
        await asyncio.gather(*(_contexts_flood(url, config["flood_s"], config["flood_contexts"])
                               for _ in range(config["flood_sockets"])))
    elif phase == "soak":
        await asyncio.gather(*(_soak(url, config["soak_s"]) for _ in range(config["soak_sessions"])))
    else:
        raise ValueError(f"no load for phase {phase!r}")
    return closes


async def load_in_process(phase: str, url: str, port: int, config: dict[str, Any]) -> Closes:
    """:func:`run_load` in a fresh interpreter (``python -m`` this module: nothing of the server's
    state is shared, and no caller's ``__main__`` is re-imported as multiprocessing's spawn would)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, "-m", __name__, phase, url, str(port), json.dumps(config), stdout=asyncio.subprocess.PIPE)
    out, _ = await child.communicate()
    if child.returncode:
        raise RuntimeError(f"the {phase} load failed (exit {child.returncode}); its error is above")
    return [tuple(c) for c in json.loads(out)]


if __name__ == "__main__":
    phase, url, port, config = sys.argv[1:]
    print(json.dumps(asyncio.run(run_load(phase, url, int(port), json.loads(config)))))
