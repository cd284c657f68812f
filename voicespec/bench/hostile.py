"""Hostile client messages, generated from protocol v1's own schema: every message type with every
field given every kind of JSON value (wrong types, huge and negative numbers, 4,300-digit
integers, control characters, lone surrogates and non-characters, digit floods, deep nesting,
unknown fields), plus a raw corpus of frames that are not JSON objects at all. Seeded, so a
failure replays; no third-party dependency, so the ``stress`` tool runs on a bare install."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from typing import Any

from voicespec.serve import protocol as P

RAW = [
    "", " ", "{", "}", "[]", "null", "true", "0", '"start"', "{oops", "[" * 5000, "{" * 5000,
    '{"type": "flush", "context_id": "a", "flush_id": ' + "1" * 4301 + "}",
    '{"type": "start", "seed": ' + "9" * 5000 + "}", '{"type": "text", "text": "\\ud800"}',
    '{"type": "start", "temperature": 1e999}', '{"type": "start", "temperature": NaN}',
    '{"type": "start", "seed": -Infinity}', '{"type":"text","context_id":"a","text":"hi"}' * 3,
    "\x00" * 64, "\ufeff{}", '{"type": "start"}' + "x" * 10,
    '{"type": "text", "context_id": "a", "text": "\\ud800 x."}',
    '{"type": "text", "context_id": "a", "text": "\\ufdd0."}',
    '{"type": "text", "context_id": "a", "text": "' + "1" * 4300 + '."}',
]
# Code points that are not characters: lone surrogates (high, low, surrogateescape's) and non-characters.
NOT_CHARACTERS = ["\ud800", "\udbff", "\udc80", "\udfff", "\ufdd0", "\ufdef", "\ufffe", "\uffff", "\U0001fffe",
                  "\U0010ffff"]
BINARY = [b"", b"\x00", b"\xff" * 100, b'{"type": "start"}']


def _value(rng: random.Random, depth: int = 0) -> Any:
    """Any JSON value, biased toward the ones that break parsers and validators."""
    kind = rng.randrange(17)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.choice([0, -1, 1, 2**31, -(2**63), 2**63, 2**64, 10**30, 2**53, 2**53 - 1])
    if kind == 3:
        return int("9" * rng.choice([16, 300, 4299]))  # json.dumps writes it; the parser limit is 4,300 digits
    if kind == 4:
        return rng.choice([0.0, -0.0, 1e-300, 1e300, -1e300, 1e308, 5e-324, 0.5, -3.25])
    if kind == 5:
        return rng.choice(["", "a", "auto", "default", "a\n", "a b", "é" * 65, "x" * 64, "x" * 65, "\x00",
                           "start", "text", "\u202e", "🙂" * 10])
    if kind == 6:
        return "".join(chr(rng.randrange(0, 0x3000)) for _ in range(rng.randrange(0, 40)))
    if kind == 7:
        return rng.choice(["1" * 4301, "1" * 4300, "1" * 4300 + ".", "3" * 4300 + "rd.", "1,000" * 800,
                           "$" + "9" * 4350, "Dr. " * 300, "。" * 100, "...!!??", "a" * 6000])
    if kind == 8:
        return rng.choice(["Hello there. ", "No. 5 at 7:30 p.m. ", "It costs $3.50. ", "okay"])
    if kind in (9, 10) and depth < 3:
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]
    if kind in (11, 12) and depth < 3:
        return {rng.choice(["type", "text", "context_id", "x", ""]): _value(rng, depth + 1) for _ in range(rng.randrange(0, 4))}
    if kind == 13:
        return rng.randrange(-10, 10**6)
    if kind == 14:
        return rng.choice(list(P.MESSAGE_FIELDS))
    if kind == 15:  # a code point that is not a character, inside otherwise speakable text
        text = rng.choice(["", "x.", "Hello there. ", "Caf"])
        at = rng.randrange(len(text) + 1)
        return text[:at] + rng.choice(NOT_CHARACTERS) + text[at:]
    return rng.random() * rng.choice([1, 100, 1e6])


def hostile_messages(n: int, seed: int = 0) -> Iterator[str | bytes]:
    """``n`` messages: mostly schema-shaped objects with hostile field values, some raw frames."""
    rng = random.Random(seed)
    kinds = list(P.MESSAGE_FIELDS)
    for _ in range(n):
        r = rng.random()
        if r < 0.05:
            yield rng.choice(RAW)
        elif r < 0.07:
            yield rng.choice(BINARY)
        else:
            kind = rng.choice(kinds)
            msg: dict[str, Any] = {"type": kind if rng.random() < 0.9 else _value(rng)}
            for name in P.MESSAGE_FIELDS[kind]:
                if rng.random() < 0.7:
                    msg[name] = _value(rng)
            if rng.random() < 0.1:
                msg[rng.choice(["extra", "typ", "Type", "contextId"])] = _value(rng)
            yield json.dumps(msg)
