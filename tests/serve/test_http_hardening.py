"""The plain-HTTP side of `voicespec serve` against what an outside probe sent it: a real server on
127.0.0.1 and raw sockets, so the bytes on the wire are exactly the probe's (pipelined requests,
half-closes, odd methods, tokens on operator pages, odd ``ttl_s``), and no ERROR-level log record
may come of any of it.

The server runs on the test's own event loop (``asyncio.run``); the clients are asyncio streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator

import pytest
from websockets.client import ClientProtocol
from websockets.frames import Frame, Opcode
from websockets.uri import parse_uri

from voicespec.serve import tokens
from voicespec.serve.config import ServerConfig
from voicespec.serve.server import TTSServer

KEY = "sekrit"
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture
def errors(caplog):
    """The ERROR-level records (and any with a traceback) logged meanwhile, by the server or websockets."""
    caplog.set_level(logging.WARNING)
    return lambda: [f"{r.name}: {r.getMessage()}" for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


@contextlib.asynccontextmanager
async def serving(voice, **overrides) -> AsyncIterator[TTSServer]:
    """A TTSServer on 127.0.0.1:<ephemeral>, on the running loop."""
    async with TTSServer(ServerConfig(**{"port": 0, "ping_interval_s": None, **overrides}), voice) as server:
        yield server


@contextlib.asynccontextmanager
async def port_of(voice, **overrides) -> AsyncIterator[int]:
    async with serving(voice, **overrides) as server:
        yield server.port


async def exchange(port: int, data: bytes, half_close: bool = False) -> bytes:
    """All the server sends back for ``data`` (written in one TCP write) until it closes."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(data)
        if half_close:
            writer.write_eof()
        return await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()


def parse(raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one HTTP response; status 0 for none."""
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    if not lines[0].startswith("HTTP/1.1 "):
        return 0, {}, raw
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), {k.lower(): v for k, v in headers.items()}, body


async def request(port: int, method: str = "GET", target: str = "/healthz", **headers: str) -> tuple[int, dict, bytes]:
    """One request (``method`` may be any bytes, as latin-1 text) and its parsed response."""
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", *(f"{k}: {v}" for k, v in headers.items())]
    return parse(await exchange(port, ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")))


def error_body(body: bytes) -> dict:
    """The server's JSON error shape, checked: ``{"error": code, "message": text}``."""
    doc = json.loads(body)
    assert set(doc) == {"error", "message"} and doc["message"], doc
    return doc


# ----------------------------------------------------------------------------- 4: pipelining


def test_pipelined_requests_get_the_first_answered_and_no_traceback(tiny_voice, errors):
    """Two GET /healthz in one write got no response at all (websockets parsed the second one as
    a WebSocket frame before process_request ran, failed the connection and half-closed it), and
    send_response's AssertionError was logged now and then."""

    async def go():
        async with port_of(tiny_voice) as port:
            replies = [parse(await exchange(port, HEALTHZ * 2)) for _ in range(20)]
            t0 = time.monotonic()
        return replies, time.monotonic() - t0

    replies, closing_s = run(go())
    for status, headers, body in replies:
        assert status == 200 and headers["connection"] == "close", (status, headers)
        assert len(body) == int(headers["content-length"]) and json.loads(body)["ok"] is True
    assert closing_s < 5  # no connection lingered until websockets' 10 s close timeout
    assert errors() == []


def test_a_request_then_a_half_close_is_answered(tiny_voice, errors):
    """The client's EOF right behind a request (``printf ... | nc -N``) failed the connection the
    same way: nothing may be read past a request until it is answered."""

    async def go():
        async with port_of(tiny_voice) as port:
            return [parse(await exchange(port, HEALTHZ, half_close=True)) for _ in range(20)]

    for status, headers, body in run(go()):
        assert status == 200 and json.loads(body)["ok"] is True, (status, headers)
    assert errors() == []


def test_a_head_whose_end_straddles_two_reads_is_answered(tiny_voice, errors):
    """The empty line ending a request may arrive split (``\\r\\n\\r`` then ``\\n``), the next
    request right behind it."""

    async def once(port: int) -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            for piece in (HEALTHZ[:-1], HEALTHZ[-1:] + HEALTHZ):
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0.05)  # two reads on the server's side
            return await asyncio.wait_for(reader.read(), 10)
        finally:
            writer.close()

    async def go():
        async with port_of(tiny_voice) as port:
            return [parse(await once(port)) for _ in range(5)]

    for status, headers, body in run(go()):
        assert status == 200 and json.loads(body)["ok"] is True, (status, headers)
    assert errors() == []


def test_a_frame_right_behind_the_upgrade_is_read_after_the_101(tiny_voice, errors):
    """Bytes held back while a request is answered are not lost: after a 101 they are the
    socket's first frames (here a ``start`` written with the upgrade request)."""

    async def go():
        async with port_of(tiny_voice) as port:
            client = ClientProtocol(parse_uri(f"ws://127.0.0.1:{port}/v1/stream"))
            client.send_request(client.connect())
            start = Frame(Opcode.TEXT, json.dumps({"type": "start"}).encode()).serialize(mask=True)
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"".join(client.data_to_send()) + start)
            try:
                while True:
                    chunk = await asyncio.wait_for(reader.read(65536), 10)
                    assert chunk, "closed before any reply"
                    client.receive_data(chunk)
                    for event in client.events_received():
                        if isinstance(event, Frame) and event.opcode is Opcode.TEXT:
                            return json.loads(event.data)
            finally:
                writer.close()

    assert run(go())["type"] == "ready"
    assert errors() == []


# ----------------------------------------------------------------------------- 6: methods


def test_only_get_and_head_are_served(tiny_voice, errors):
    """POST, PUT, DELETE, TRACE, a NUL in the method and a 5,000-character method were all
    answered 200 as if GET."""

    async def go():
        async with serving(tiny_voice) as server:
            port = server.port
            refused = {m: await request(port, m) for m in ("POST", "PUT", "DELETE", "TRACE", "PATCH", "OPTIONS")}
            malformed = [await request(port, m) for m in ("G\x00ET", "X" * 5000, "GET\x7f", "G(E)T")]
            not_ascii = await exchange(port, "GÉT /healthz HTTP/1.1\r\n\r\n".encode("latin-1"))
            get, head = await request(port, "GET", "/"), await request(port, "HEAD", "/")
            health_head = await request(port, "HEAD")
            upgrades = [await request(port, m, "/v1/stream", Upgrade="websocket", Connection="Upgrade",
                                      **{"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"})
                        for m in ("POST", "HEAD")]
        return refused, malformed, not_ascii, get, head, health_head, upgrades

    refused, malformed, not_ascii, get, head, health_head, upgrades = run(go())
    for method, (status, headers, body) in refused.items():
        assert status == 405 and headers["allow"] == "GET, HEAD", (method, status, headers)
        assert error_body(body)["error"] == "method_not_allowed" and method in error_body(body)["message"]
    for status, _, body in malformed:
        assert status == 400 and error_body(body)["error"] == "bad_request"
    assert not_ascii == b""  # websockets' parser refuses a request line that is not ASCII: closed unanswered
    assert get[0] == head[0] == 200 and head[2] == b"" and len(get[2]) > 1000
    assert head[1]["content-length"] == get[1]["content-length"] == str(len(get[2]))
    assert head[1]["content-type"] == get[1]["content-type"]
    assert health_head[0] == 200 and health_head[2] == b""
    for status, headers, body in upgrades:  # the WebSocket handshake is GET only
        assert status == 405 and headers["allow"] == "GET" and error_body(body)["error"] == "method_not_allowed"
    assert errors() == []


# ----------------------------------------------------------------------------- 7: what a token opens


def test_a_token_opens_the_voice_list_but_not_the_metrics(tiny_voice, errors):
    """A browser's token opens /v1/stream and /v1/voices; /metrics is the operator's: the key only."""

    async def go():
        async with serving(tiny_voice, api_key=KEY) as server:
            port = server.port
            status, _, body = await request(port, "GET", "/v1/token?ttl_s=60", Authorization=f"Bearer {KEY}")
            assert status == 200
            token = json.loads(body)["token"]
            return {
                "voices, token in the URL": await request(port, "GET", f"/v1/voices?token={token}"),
                "voices, token as bearer": await request(port, "GET", "/v1/voices", Authorization=f"Bearer {token}"),
                "metrics, token in the URL": await request(port, "GET", f"/metrics?token={token}"),
                "metrics, token as bearer": await request(port, "GET", "/metrics", Authorization=f"Bearer {token}"),
                "metrics, no credential": await request(port, "GET", "/metrics"),
                "metrics, key as bearer": await request(port, "GET", "/metrics", Authorization=f"Bearer {KEY}"),
                "metrics, key in the URL": await request(port, "GET", f"/metrics?api_key={KEY}"),
            }

    r = run(go())
    assert r["voices, token in the URL"][0] == r["voices, token as bearer"][0] == 200
    assert json.loads(r["voices, token in the URL"][2])["default"] == tiny_voice.name
    for case in ("metrics, token in the URL", "metrics, token as bearer", "metrics, no credential"):
        assert r[case][0] == 401 and error_body(r[case][2])["error"] == "unauthorized", case
    assert "API key" in error_body(r["metrics, token as bearer"][2])["message"]
    for case in ("metrics, key as bearer", "metrics, key in the URL"):
        assert r[case][0] == 200 and b"voicespec_active_sessions" in r[case][2], case
    assert errors() == []


# ----------------------------------------------------------------------------- 8: ttl_s


@pytest.mark.parametrize("text", ["0.4", "0", "0.999", "1_000", "١٠", "1e3", "inf", "nan", "NaN", " 5", "5 ", "+5",
                                  "-5", "5.", ".5", "0x10", "3601", "3600.5", "5\n", ""])
def test_parse_ttl_refuses_all_but_plain_decimals_in_range(text):
    with pytest.raises(ValueError, match="ttl_s must be"):
        tokens.parse_ttl(text)


def test_parse_ttl_reads_plain_decimals():
    assert [tokens.parse_ttl(t) for t in ("1", "300", "0060", "2.5", "3600", "3600.0")] == [1, 300, 60, 2.5, 3600, 3600.0]
    assert isinstance(tokens.parse_ttl("300"), int)  # echoed as 300, not 300.0


@pytest.mark.parametrize("now", [1_000_000.0, 1_000_000.4, 1_000_000.9, 1_000_000.999])
@pytest.mark.parametrize("ttl", [1, 1.5, 2.25, 300, 3600])
def test_a_minted_token_lives_at_least_its_ttl(now, ttl):
    """The expiry was truncated to a whole second: ttl 0.4 gave a token already expired, and
    any ttl up to a second less than asked. It is rounded up now, and ttl_s is at least 1."""
    token, expires = tokens.mint(KEY, ttl, now)
    assert isinstance(expires, int) and now + ttl <= expires < now + ttl + 1
    assert tokens.verify(KEY, token, now) and tokens.verify(KEY, token, now + ttl - 1e-3)
    assert not tokens.verify(KEY, token, expires) and not tokens.verify("other", token, now)


@pytest.mark.parametrize("ttl", [0.4, 0, -1, 3600.5, float("nan"), float("inf")])
def test_mint_refuses_a_ttl_out_of_range(ttl):
    with pytest.raises(ValueError, match="ttl_s must be"):
        tokens.mint(KEY, ttl, 1_000_000.0)


def test_verify_reads_only_ascii_digits_as_the_expiry():
    """str.isdigit() passed Arabic-Indic digits; a signed token must say its expiry in ASCII."""
    body = "v1.١٠٠٠٠٠٠٠٠٠٠.nonce"  # 10^10, in Arabic-Indic digits
    assert not tokens.verify(KEY, f"{body}.{tokens._sign(KEY, body)}", 1_000_000.0)


def test_the_token_endpoint_takes_only_plain_ttls(tiny_voice, errors):
    """Through HTTP: ttl_s=0.4 gave an expired token with 200; "1_000" and "١٠" passed as numbers."""
    bad = ["0.4", "1_000", "%D9%A1%D9%A0", "1e3", "inf", "nan", "%205", "-5", "3601"]  # %D9%A1%D9%A0: "١٠"

    async def go():
        async with serving(tiny_voice, api_key=KEY) as server:
            port, auth = server.port, {"Authorization": f"Bearer {KEY}"}
            refused = {t: await request(port, "GET", f"/v1/token?ttl_s={t}", **auth) for t in bad}
            before = time.time()
            shortest = await request(port, "GET", "/v1/token?ttl_s=1", **auth)
            fractional = await request(port, "GET", "/v1/token?ttl_s=2.5", **auth)
            default = await request(port, "GET", "/v1/token", **auth)
            token = json.loads(shortest[2])["token"]
            opens = await request(port, "GET", f"/v1/voices?token={token}")
        return refused, before, shortest, fractional, default, opens

    refused, before, shortest, fractional, default, opens = run(go())
    for text, (status, _, body) in refused.items():
        assert status == 400 and error_body(body)["error"] == "bad_request", text
        assert "ttl_s must be" in error_body(body)["message"], text
    for reply, ttl in ((shortest, 1), (fractional, 2.5), (default, tokens.DEFAULT_TTL_S)):
        assert reply[0] == 200
        doc = json.loads(reply[2])
        assert doc["ttl_s"] == ttl and doc["expires_at"] >= before + ttl
    assert opens[0] == 200  # a one-second token is valid when handed out
    assert errors() == []
