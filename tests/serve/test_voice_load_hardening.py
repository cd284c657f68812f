"""Issue 39, defect 5: a broken installed voice fails once, quietly, and says nothing of the server.

A voice folder that cannot load (an unexpected field in its voice.json, missing weights), named
in `start` or in a first `text`, used to be reloaded on every request, each time logging a full
traceback, and its error frame carried the server's paths and the exception's text. Now the first
failure is logged once and remembered (serve/voices.py); every request for it fails fast with
`unknown_voice` naming the voice only. Real voice folders, found through $VOICESPEC_VOICES by a
real server on loopback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from websockets.asyncio.client import connect

from voicespec.pipeline.tiny import build_tiny_voice
from voicespec.pipeline.voice import VOICE_FILE
from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.server import server_thread

START = {"type": "start", "sample_rate": 16000, "seed": 3, "gamma": 2}
REQUESTS = 10  # per way of naming the voice: each a traceback and a reload before the fix


@contextmanager
def running(lent, **overrides):
    """A TTSServer on 127.0.0.1:<ephemeral>, on its own loop and thread, serving the voice ``lent``
    (None: the one ``overrides["voice"]`` names, loaded by the server); yields the server."""
    with server_thread(ServerConfig(**{"port": 0, "max_steps": 16, "ping_interval_s": None, **overrides}), lent) as server:
        yield server


def ws_url(server) -> str:
    return f"ws://127.0.0.1:{server.port}/v1/stream"


async def next_message(ws) -> dict:
    """The next JSON message (audio frames skipped)."""
    while True:
        m = await ws.recv()
        if isinstance(m, str):
            return json.loads(m)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 60))


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory) -> Path:
    """Installed voices, two of them broken: ``secret`` (voice.json holds a field no voice has)
    and ``weightless`` (its target's weights are gone)."""
    root = tmp_path_factory.mktemp("installed")
    secret = build_tiny_voice(root / "secret")
    cfg = json.loads((secret / VOICE_FILE).read_text())
    (secret / VOICE_FILE).write_text(json.dumps({**cfg, "SECRET_FIELD_abc": 1}))
    weightless = build_tiny_voice(root / "weightless")
    for f in (weightless / "target").glob("*.safetensors"):
        f.unlink()
    return root


def tracebacks(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None]


def assert_clean_refusal(err: dict, name: str, voices_dir: Path, cid: str | None) -> None:
    """`unknown_voice`, not fatal, naming the voice; no path, no exception text."""
    assert err["type"] == "error" and err["code"] == P.UNKNOWN_VOICE and not err["fatal"], err
    assert err["context_id"] == cid and err["context_ended"] == (cid is not None), err
    text = err["message"]
    assert repr(name) in text and "failed to load on the server" in text, text
    for leak in ("SECRET_FIELD", "unexpected", str(voices_dir), "/tmp", VOICE_FILE, "safetensors", "Error"):
        assert leak not in text, (leak, text)


@pytest.mark.parametrize("name", ["secret", "weightless"])
def test_a_broken_voice_fails_once_in_the_log_and_cleanly_for_every_request(name, tiny_voice, voices_dir,
                                                                             monkeypatch, caplog):
    """Named in `start` and in a first `text`, many times: one traceback in all, each refusal
    `unknown_voice` without paths or exception text, and the connection goes on serving."""
    monkeypatch.setenv("VOICESPEC_VOICES", str(voices_dir))

    async def go(server):
        errors = []
        async with connect(ws_url(server)) as ws:
            for _ in range(REQUESTS):  # a refused start leaves the connection unstarted: start again
                await ws.send(json.dumps({**START, "voice": name}))
                errors.append((await next_message(ws), None))
            await ws.send(json.dumps(START))
            assert (await next_message(ws))["type"] == "ready"
            for i in range(REQUESTS):
                cid = f"c{i}"
                await ws.send(json.dumps({"type": "text", "context_id": cid, "text": "Hello there. ", "voice": name}))
                errors.append((await next_message(ws), cid))
            await ws.send(json.dumps({"type": "text", "context_id": "ok", "text": "Hello there."}))
            await ws.send(json.dumps({"type": "end", "context_id": "ok"}))
            done = await next_message(ws)
        return errors, done

    with running(tiny_voice, max_messages_per_s=1000) as server:
        assert name in server.voices.names  # installed: found the way the server finds voices
        errors, done = run(go(server))
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/v1/voices", timeout=10) as r:
            listed = {v["name"]: v for v in json.loads(r.read())["voices"]}
    for err, cid in errors:
        assert_clean_refusal(err, name, voices_dir, cid)
    assert done["type"] == "done" and done["context_id"] == "ok", done
    assert len(tracebacks(caplog)) == 1, [r.getMessage() for r in tracebacks(caplog)]
    assert name in tracebacks(caplog)[0].getMessage()
    assert not listed[name]["loaded"] and listed[name]["error"] == "failed to load on the server"


def test_concurrent_requests_for_a_broken_voice_share_one_failed_load(tiny_voice, voices_dir, monkeypatch, caplog):
    """Connections that name the voice at once wait on one load; its failure is logged once."""
    monkeypatch.setenv("VOICESPEC_VOICES", str(voices_dir))

    async def one(server) -> dict:
        async with connect(ws_url(server)) as ws:
            await ws.send(json.dumps({**START, "voice": "secret"}))
            return await next_message(ws)

    async def go(server):
        return await asyncio.gather(*(one(server) for _ in range(6)))

    with running(tiny_voice) as server:
        errors = run(go(server))
    for err in errors:
        assert_clean_refusal(err, "secret", voices_dir, None)
    assert len(tracebacks(caplog)) == 1, [r.getMessage() for r in tracebacks(caplog)]
