"""The plain-HTTP side of the server's port: the WebSocket handshake's checks (path, API key,
origin) and the pages served without a WebSocket (``/healthz``, ``/metrics``, the browser player).

Kept apart from the sessions so what a request may reach is decided, and can be read, in one place.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Collection
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from voicespec.paths import STATIC_DIR
from voicespec.serve import protocol as P
from voicespec.serve.protocol import WS_PATH
from voicespec.serve.config import ServerConfig
from voicespec.serve.metrics import ServerMetrics

STATIC_FILES = {"/": ("index.html", "text/html"), "/index.html": ("index.html", "text/html"),
                "/player.js": ("player.js", "text/javascript"), "/worklet.js": ("worklet.js", "text/javascript"),
                "/PROTOCOL.md": ("PROTOCOL.md", "text/markdown")}


def response(status: int, body: bytes, ctype: str) -> Response:
    headers = Headers([("Content-Type", ctype), ("Content-Length", str(len(body))), ("Connection", "close"),
                       ("Cache-Control", "no-store")])
    return Response(status, HTTPStatus(status).phrase, headers, body)


def authorized(request: Request, query: dict[str, list[str]], api_key: str | None) -> bool:
    """The key may come as ``Authorization: Bearer KEY`` or, for browsers (which cannot set
    headers on a WebSocket), as ``?api_key=KEY``; compared in constant time."""
    if api_key is None:
        return True
    scheme, _, token = request.headers.get("Authorization", "").strip().partition(" ")
    given = token.strip() if scheme.lower() == "bearer" else (query.get("api_key") or [""])[0]  # RFC 7235: any case
    return hmac.compare_digest(given.encode(), api_key.encode())


def origin_ok(request: Request, allowed_origins: tuple[str, ...]) -> bool:
    """Non-browser clients send no Origin; browsers may connect from an allowed origin, or
    from this server's own page when it is addressed by IP or as localhost (a page of some
    other site must not drive the server; a domain name could be DNS-rebound to it, so a
    server behind a name lists that origin in ``allowed_origins``)."""
    origin = request.headers.get("Origin")
    if origin is None or "*" in allowed_origins or origin in allowed_origins:
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


class HttpFront:
    """``process_request`` for ``websockets.serve``: None lets a WebSocket handshake through;
    anything else is answered with a :class:`Response` (a page, or a JSON error, counted in the
    metrics) and never reaches a session."""

    def __init__(self, config: ServerConfig, metrics: ServerMetrics, voice_name: str, sessions: Collection) -> None:
        self.config = config
        self.metrics = metrics
        self.voice_name = voice_name
        self.sessions = sessions  # the server's live set: /healthz reports how many are open
        self.static = {path: (STATIC_DIR / name, ctype) for path, (name, ctype) in STATIC_FILES.items()}

    def reject(self, status: int, code: str, text: str) -> Response:
        self.metrics.error(code)
        body = json.dumps({"error": code, "message": text}).encode()
        return response(status, body, "application/json")

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        url = urlsplit(request.path)
        query = parse_qs(url.query)
        if request.headers.get("Upgrade", "").lower() != "websocket":
            return self.page(url.path, request, query)
        if url.path != WS_PATH:
            return self.reject(404, "not_found", f"the WebSocket endpoint is {WS_PATH}")
        if not authorized(request, query, self.config.api_key):
            return self.reject(401, "unauthorized", "missing or wrong API key (Authorization: Bearer KEY or ?api_key=KEY)")
        if not origin_ok(request, self.config.allowed_origins):
            return self.reject(403, "forbidden_origin", f"origin {request.headers.get('Origin')!r} is not allowed")
        return None

    def page(self, path: str, request: Request, query: dict[str, list[str]]) -> Response:
        if path == "/healthz":
            body = {"ok": True, "voice": self.voice_name, "sessions": len(self.sessions),
                    "max_sessions": self.config.max_sessions, "protocol": P.VERSION}
            return response(200, json.dumps(body).encode(), "application/json")
        if path == "/metrics":
            if not authorized(request, query, self.config.api_key):
                return self.reject(401, "unauthorized", "missing or wrong API key")
            return response(200, *self.metrics.exposition())
        if path in self.static:
            file, ctype = self.static[path]
            if file.is_file():
                return response(200, file.read_bytes(), f"{ctype}; charset=utf-8")
        return self.reject(404, "not_found", f"no such page {path!r}; try /, /healthz, /metrics or {WS_PATH}")
