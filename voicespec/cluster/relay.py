"""The ingress's plumbing, apart from the deployments: relaying one socket both ways, fetching a
replica's page, merging replicas' metrics. (Serve ships the ingress class to its actor by value;
its methods import this module where they run.)"""

import asyncio
import json
import urllib.error
import urllib.request
from typing import Any

from starlette.responses import Response
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from voicespec.serve import protocol as P

REPLICA_LOST = "replica_lost"


async def deny(ws: WebSocket, status: int, code: str | None, body: bytes | str) -> None:
    """Refuse a handshake as the plain server does (an HTTP status and a JSON body) where the ASGI
    server supports denial responses, else close before accepting (the client sees 403)."""
    if code is not None:
        body = json.dumps({"error": code, "message": body})
    try:
        await ws.send_denial_response(Response(body, status, media_type="application/json"))
    except RuntimeError:
        await ws.close(1008)


async def relay(ws: WebSocket, upstream) -> None:
    """Both directions until either side ends; the replica's close code and reason reach the
    client, and a replica gone without a close frame becomes ``replica_lost``."""

    async def up() -> None:
        try:
            while True:
                msg = await ws.receive()
                if msg["type"] == "websocket.disconnect":
                    return
                await upstream.send(msg["bytes"] if msg.get("bytes") is not None else msg.get("text", ""))
        except (WebSocketDisconnect, ConnectionClosed):
            return

    async def down() -> tuple[int, str] | None:
        try:
            async for msg in upstream:
                await (ws.send_bytes(msg) if isinstance(msg, bytes) else ws.send_text(msg))
        except ConnectionClosedOK:
            pass
        except ConnectionClosed:
            if upstream.close_code is None or upstream.close_code == 1006:
                return None  # no close frame: the replica is gone
        return upstream.close_code or P.CLOSE_NORMAL, upstream.close_reason or ""

    tasks = {asyncio.ensure_future(up()): "up", asyncio.ensure_future(down()): "down"}
    done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    first = done.pop()
    if tasks[first] == "up":  # the client left
        await upstream.close()
        return
    closed = first.result()
    try:
        if closed is None:
            await ws.send_text(P.error_message(REPLICA_LOST, "the server replica holding this session stopped; "
                                               "reconnect to continue on another", fatal=True))
            await ws.close(P.CLOSE_INTERNAL, "replica lost")
        else:
            await ws.close(*closed)
    except (RuntimeError, WebSocketDisconnect):
        pass  # the client is gone too


async def fetch(url: str, headers: dict[str, str]) -> tuple[int, str, bytes] | None:
    """GET on a thread: (status, content type, body), or None if the replica does not answer."""
    def get() -> tuple[int, str, bytes] | None:
        req = urllib.request.Request(url, headers={k: v for k, v in headers.items() if k.lower() in ("authorization",)})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                return r.status, r.headers.get("Content-Type", ""), r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.headers.get("Content-Type", ""), e.read()
        except OSError:
            return None

    return await asyncio.to_thread(get)


def merge_metrics(texts: dict[str, str]) -> str:
    """Prometheus expositions of several replicas as one, each sample labelled with its replica."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample

    families: dict[str, Any] = {}
    for rid, text in texts.items():
        for fam in text_string_to_metric_families(text):
            samples = [Sample(s.name, {**s.labels, "replica": rid}, s.value, s.timestamp, s.exemplar)
                       for s in fam.samples]
            if fam.name in families:
                families[fam.name].samples.extend(samples)
            else:
                fam.samples = samples
                families[fam.name] = fam

    class Merged:
        def collect(self):
            return list(families.values())

    return generate_latest(Merged()).decode()
