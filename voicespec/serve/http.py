"""The plain-HTTP side of the server's port: the WebSocket handshake's checks (path, API key or
token, origin) and what is served without a WebSocket: ``/healthz``, ``/metrics``, ``/v1/voices``,
``/v1/token``, the browser player and ``/protocol`` (PROTOCOL.md as HTML).

Kept apart from the sessions so what a request may reach is decided, and can be read, in one place.
Only GET (and HEAD, for the pages) is served; every response closes the connection.
"""

from __future__ import annotations

import hmac
import html
import ipaddress
import json
import re
import time
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from collections.abc import Collection
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import ServerConnection
from websockets.datastructures import Headers
from websockets.http11 import Request, Response
from websockets.protocol import CONNECTING

from voicespec.paths import STATIC_DIR
from voicespec.serve import protocol as P
from voicespec.serve.protocol import WS_PATH
from voicespec.serve import tokens
from voicespec.serve.config import ServerConfig
from voicespec.serve.metrics import ServerMetrics
from voicespec.serve.voices import VoiceSet

STATIC_TYPES = {".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".md": "text/markdown",
                ".png": "image/png", ".svg": "image/svg+xml"}
PAGE_METHODS = "GET, HEAD"  # the WebSocket handshake is GET only (RFC 6455)
# An RFC 9110 token, of a sane length: websockets passes any bytes without a space (NUL, 5,000 "X"s).
METHOD = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,32}")
HEAD_END = b"\r\n\r\n"  # a request head ends at its first empty line (websockets reads no body)


def response(status: int, body: bytes, ctype: str) -> Response:
    headers = Headers([("Content-Type", ctype), ("Content-Length", str(len(body))), ("Connection", "close"),
                       ("Cache-Control", "no-store")])
    return Response(status, HTTPStatus(status).phrase, headers, body)


def credential(request: Request, query: dict[str, list[str]]) -> str:
    """What the client presents: ``Authorization: Bearer X`` or, for browsers (which cannot set
    headers on a WebSocket), ``?token=X`` or ``?api_key=X``."""
    scheme, _, value = request.headers.get("Authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer":  # RFC 7235: any case
        return value.strip()
    return (query.get("token") or query.get("api_key") or [""])[0]


def authorized(request: Request, query: dict[str, list[str]], api_key: str | None, allow_token: bool = True) -> bool:
    """The API key itself (compared in constant time) or, where ``allow_token``, an unexpired
    token signed with it (:mod:`voicespec.serve.tokens`)."""
    if api_key is None:
        return True
    given = credential(request, query)
    if hmac.compare_digest(given.encode(), api_key.encode()):
        return True
    return allow_token and tokens.verify(api_key, given, time.time())


@lru_cache(maxsize=4)
def protocol_html(path: Path, mtime: float) -> bytes:
    """PROTOCOL.md as a page (markdown-it-py, the ``serve`` extra; else the text, preformatted)."""
    text = path.read_text()
    try:
        from markdown_it import MarkdownIt

        body = MarkdownIt("commonmark").enable("table").render(text)
    except ImportError:
        body = f"<pre>{html.escape(text)}</pre>"
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>voicespec protocol</title>'
            f'<link rel="stylesheet" href="/player.css"></head><body class="doc">{body}</body></html>').encode()


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


class HttpConnection(ServerConnection):
    """A ServerConnection (``serve(create_connection=...)``) that reads nothing past a request
    until that request is answered.

    websockets parses all it receives at once, so what comes right behind a request (a second,
    pipelined request, or the client's EOF) is parsed as WebSocket frames before
    ``process_request`` runs: it fails the connection and half-closes it, the response cannot be
    written and ``send_response`` trips over the EOF already sent (an AssertionError, logged with
    its traceback). Here those bytes are held, and the socket is not read, until the response is
    out: after a 101 they are the first frames; after any other response (which closes the
    connection) they are dropped."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tail = b""  # the last bytes of a request head not yet complete (its end may straddle reads)
        self.held: bytearray | None = None  # what came behind the request, until it is answered

    def data_received(self, data: bytes) -> None:
        if self.held is not None:
            self.held += data
            return
        if self.request is not None or self.protocol.eof_sent:  # answered, or a bad request being discarded
            super().data_received(data)
            return
        end = (self.tail + data).find(HEAD_END)
        if end < 0:
            self.tail = (self.tail + data)[-len(HEAD_END) + 1:]
            super().data_received(data)
            return
        cut = end + len(HEAD_END) - len(self.tail)
        super().data_received(data[:cut])
        if self.request is None:  # not a valid request: the protocol discards the rest
            if cut < len(data):
                super().data_received(data[cut:])
            return
        self.held = bytearray(data[cut:])
        self.transport.pause_reading()  # nor the EOF: the client's half-close must wait too

    def send_data(self) -> None:
        """Writes what the protocol has to send; once that includes the response, reads on."""
        super().send_data()
        if self.held is not None and (self.protocol.state is not CONNECTING or self.protocol.eof_sent):
            held, self.held = bytes(self.held), None
            self.transport.resume_reading()
            if held and self.protocol.state is not CONNECTING:  # a 101: frames sent before it
                super().data_received(held)


class HttpFront:
    """``process_request`` for ``websockets.serve``: None lets a WebSocket handshake through;
    anything else is answered with a :class:`Response` (a page, or a JSON error, counted in the
    metrics) and never reaches a session."""

    def __init__(self, config: ServerConfig, metrics: ServerMetrics, voices: VoiceSet, sessions: Collection) -> None:
        self.config = config
        self.metrics = metrics
        self.voices = voices
        self.sessions = sessions  # the server's live set: /healthz reports how many are open
        self.static = {"/": STATIC_DIR / "index.html"}
        for file in sorted(STATIC_DIR.iterdir()):
            if file.suffix in STATIC_TYPES:
                self.static["/" + file.name] = file

    def reject(self, status: int, code: str, text: str) -> Response:
        self.metrics.error(code)
        body = json.dumps({"error": code, "message": text}).encode()
        return response(status, body, "application/json")

    def process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        url = urlsplit(request.path)
        query = parse_qs(url.query)
        upgrade = request.headers.get("Upgrade", "").lower() == "websocket"
        refused = self.method_refused(request.method, "GET" if upgrade else PAGE_METHODS)
        if refused is not None:
            return refused
        if not upgrade:
            page = self.page(url.path, request, query)
            return without_body(page) if request.method == "HEAD" else page
        if url.path != WS_PATH:
            return self.reject(404, "not_found", f"the WebSocket endpoint is {WS_PATH}")
        if not authorized(request, query, self.config.api_key):
            return self.reject(401, "unauthorized", "missing, wrong or expired credential (Authorization: Bearer KEY, "
                               "?api_key=KEY, or ?token=TOKEN from GET /v1/token)")
        if not origin_ok(request, self.config.allowed_origins):
            return self.reject(403, "forbidden_origin", f"origin {request.headers.get('Origin')!r} is not allowed")
        return None

    def method_refused(self, method: str, allowed: str) -> Response | None:
        """None for a method in ``allowed``; else 405 naming the allowed ones, or 400 for bytes
        that are no method at all (never echoed back)."""
        if method in allowed.split(", "):
            return None
        if not METHOD.fullmatch(method):
            return self.reject(400, "bad_request", "malformed request method")
        use = allowed.replace(", ", " or ")
        refused = self.reject(405, "method_not_allowed", f"{method} is not served here; use {use}")
        refused.headers["Allow"] = allowed
        return refused

    def page(self, path: str, request: Request, query: dict[str, list[str]]) -> Response:
        if path == "/healthz":
            body = {"ok": True, "voice": self.voices.default.name, "voices": self.voices.names,
                    "sessions": len(self.sessions), "max_sessions": self.config.max_sessions,
                    "protocol": P.VERSION, "protocol_version": P.PROTOCOL_VERSION}
            return json_response(body)
        if path == "/metrics":  # for operators: the API key itself, not a browser's token
            if not authorized(request, query, self.config.api_key, allow_token=False):
                return self.reject(401, "unauthorized", "/metrics needs the API key itself (a token is not enough)")
            return response(200, *self.metrics.exposition())
        if path == "/v1/voices":  # a browser's player lists voices with its token
            if not authorized(request, query, self.config.api_key):
                return self.reject(401, "unauthorized", "missing, wrong or expired credential")
            return json_response({"default": self.voices.default.name, "voices": self.voices.describe()})
        if path == "/v1/token":
            return self.token(request, query)
        if path == "/protocol":
            file = STATIC_DIR / "PROTOCOL.md"
            return response(200, protocol_html(file, file.stat().st_mtime), "text/html; charset=utf-8")
        file = self.static.get(path)
        if file is not None and file.is_file():
            ctype = STATIC_TYPES[file.suffix]
            return response(200, file.read_bytes(), ctype if ctype.startswith("image/") else f"{ctype}; charset=utf-8")
        return self.reject(404, "not_found", f"no such page {path!r}; try /, /protocol, /healthz, /metrics, /v1/voices "
                           f"or {WS_PATH}")

    def token(self, request: Request, query: dict[str, list[str]]) -> Response:
        """``GET /v1/token[?ttl_s=S]`` with the API key itself (not a token): a short-lived token."""
        key = self.config.api_key
        if key is None:
            return self.reject(400, "no_api_key", "this server has no API key: connect without credentials")
        if not authorized(request, query, key, allow_token=False):
            return self.reject(401, "unauthorized", "a token is issued for the API key itself (Authorization: Bearer KEY)")
        try:
            ttl = tokens.parse_ttl(query["ttl_s"][0]) if "ttl_s" in query else tokens.DEFAULT_TTL_S
        except ValueError as e:
            return self.reject(400, "bad_request", str(e))
        token, expires = tokens.mint(key, ttl, time.time())
        return json_response({"token": token, "expires_at": expires, "ttl_s": ttl})


def json_response(body: dict) -> Response:
    return response(200, json.dumps(body).encode(), "application/json")


def without_body(page: Response) -> Response:
    """The answer to HEAD: GET's status and headers (its Content-Length too), no body."""
    return replace(page, body=b"")
