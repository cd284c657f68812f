"""Issue 39, defect 2 (text): code points that are not characters are a clear TextError.

A lone surrogate (U+D800-U+DFFF: JSON's "\\ud800", Python's surrogateescape) or a non-character
(U+FDD0-U+FDEF, U+xFFFE, U+xFFFF) used to pass ``sanitize`` and blow up in gruut's lexicon lookup
as a UnicodeEncodeError, which the server answered with `internal` and close 1011. Now
``sanitize`` names the code point and its offset; the server's client gets a non-fatal
`bad_text` for that context and goes on. The hostile generator produces such text too.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import contextmanager

import pytest
from websockets.asyncio.client import connect

from voicespec.bench.hostile import hostile_messages
from voicespec.frontend.phonemes import PhonemeTokenizer
from voicespec.frontend.text import CharTokenizer, FrontEnd, TextError, sanitize
from voicespec.serve import protocol as P

NOT_TEXT = [("\ud800", "lone surrogate"), ("\udbff", "lone surrogate"), ("\udc80", "lone surrogate"),
            ("\udfff", "lone surrogate"), ("\ufdd0", "non-character"), ("\ufdef", "non-character"),
            ("\ufffe", "non-character"), ("\uffff", "non-character"), ("\U0001fffe", "non-character"),
            ("\U0010ffff", "non-character")]
SURROGATES = [cp for cp, kind in NOT_TEXT if kind == "lone surrogate"]
NON_CHARACTERS = [cp for cp, kind in NOT_TEXT if kind == "non-character"]


@pytest.mark.parametrize("cp,kind", NOT_TEXT)
def test_sanitize_names_a_code_point_that_is_not_a_character_and_its_offset(cp, kind):
    with pytest.raises(TextError) as e:
        sanitize("Hello " + cp + " there.")
    assert kind in str(e.value) and f"U+{ord(cp):04X}" in str(e.value) and "offset 6" in str(e.value)


@pytest.mark.parametrize("text", ["\ufffd replaced", "emoji \U0001f642 pair", "\ufdcf \ufdf0 \ufffd near misses",
                                  "\U0001fffd plane one", "a\u200bb"])
def test_characters_beside_the_rejected_ranges_still_pass(text):
    assert sanitize(text)


@pytest.mark.parametrize("tokenizer", [CharTokenizer(), PhonemeTokenizer()], ids=["chars", "phonemes"])
@pytest.mark.parametrize("text", ["\ud800 x.", "x \udfff.", "Caf\udce9.", "\ufdd0.", "ok \uffff ok."])
def test_the_front_end_raises_text_error_never_a_unicode_error(tokenizer, text):
    """The probe's text: gruut's lexicon lookup once raised UnicodeEncodeError on it."""
    with pytest.raises(TextError, match="not text"):
        FrontEnd(tokenizer).sentences(text)


def test_the_hostile_generator_makes_such_text_and_digit_floods_deterministically():
    a = list(hostile_messages(3000, seed=5))
    assert a == list(hostile_messages(3000, seed=5))
    texts = [json.loads(m) for m in a if isinstance(m, str) and m.startswith("{") and '"type": "text"' in m]
    values = [v for msg in texts if isinstance(msg, dict) for v in msg.values() if isinstance(v, str)]
    flat = "".join(values)
    assert any(c in flat for c in SURROGATES) and any(c in flat for c in NON_CHARACTERS)
    assert any("1" * 4300 in v for v in values)  # a 4,300-digit flood in a text
    for v in values:  # every such value is a clear error, or text, never anything else
        if any(c in v for c in SURROGATES + NON_CHARACTERS):
            with pytest.raises(TextError):
                sanitize(v)


# ----------------------------------------------------------------------------- the server


@contextmanager
def running(lent, **overrides):
    """A TTSServer on 127.0.0.1:<ephemeral>, on its own loop and thread, serving the voice ``lent``
    (None: the one ``overrides["voice"]`` names, loaded by the server); yields the server."""
    from voicespec.serve.config import ServerConfig
    from voicespec.serve.server import server_thread

    with server_thread(ServerConfig(**{"port": 0, "max_steps": 16, "ping_interval_s": None, **overrides}), lent) as server:
        yield server


@pytest.fixture(scope="module")
def phoneme_voice(tmp_path_factory):
    """A tiny voice reading phonemes (gruut), as the shipped one does."""
    from voicespec.pipeline.tiny import build_tiny_voice
    from voicespec.pipeline.voice import Voice

    return Voice.load(build_tiny_voice(tmp_path_factory.mktemp("voices") / "coarse", layout="coarse"))


async def next_message(ws) -> dict:
    """The next JSON message (audio frames skipped)."""
    while True:
        m = await ws.recv()
        if isinstance(m, str):
            return json.loads(m)


@pytest.mark.parametrize("text", ["\ud800 x.", "\ufdd0 x."])
def test_the_server_answers_such_text_with_bad_text_and_goes_on(text, phoneme_voice, caplog):
    """The probe: `text` with a lone surrogate, then `end`. A non-fatal `bad_text` for that
    context, no traceback in the log, and the same connection then speaks another context."""
    async def go(server):
        async with connect(f"ws://127.0.0.1:{server.port}/v1/stream") as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": 16000, "seed": 1}))
            assert (await next_message(ws))["type"] == "ready"
            await ws.send(json.dumps({"type": "text", "context_id": "a", "text": text}))
            await ws.send(json.dumps({"type": "end", "context_id": "a"}))
            err = await next_message(ws)
            await ws.send(json.dumps({"type": "text", "context_id": "b", "text": "Hello there."}))
            await ws.send(json.dumps({"type": "end", "context_id": "b"}))
            done = await next_message(ws)
        return err, done

    with running(phoneme_voice) as server:
        err, done = asyncio.run(asyncio.wait_for(go(server), 60))
    assert err["type"] == "error" and err["code"] == P.BAD_TEXT, err
    assert err["context_id"] == "a" and err["context_ended"] and not err["fatal"], err
    assert done["type"] == "done" and done["context_id"] == "b", done
    assert [r.getMessage() for r in caplog.records if r.exc_info is not None] == []
