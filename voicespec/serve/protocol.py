"""Streaming protocol v1: client messages, server messages, the binary audio frame.

Pure functions and dataclasses only (no sockets, no torch), so the server, the Python client
and the tests share one definition, and every rule is unit-testable. ``stream/PROTOCOL.md`` is
the prose version with examples.

Binary audio frame (server → client), all integers little-endian::

    offset  size  field
    0       2     magic b"VS"
    2       1     protocol version (1)
    3       1     context id length L (1..64)
    4       4     seq: uint32, 0, 1, 2, ... per context (no gaps, no duplicates)
    8       4     n_samples: uint32, samples in the payload (mono)
    12      P     context id (UTF-8, L bytes), zero-padded to P = L rounded up to a multiple of 4
    12+P    ...   payload: n_samples samples, pcm_s16le (2 bytes each), f32le (4), mulaw/alaw (1);
                  for opus, n_samples bytes of the context's Ogg Opus stream

The padding keeps the payload 4-byte aligned, so a browser can view it as a typed array in place.
"""

from __future__ import annotations

import base64
import json
import re
import struct
from dataclasses import dataclass, field
from typing import Any

from voicespec.checks import is_int, is_number
from voicespec.engine.controller import check_gamma
from voicespec.engine.tree_shapes import check_tree
from voicespec.options import (ENCODINGS, SAMPLING_OPTIONS, check_encoding, check_sample_rate, check_speed,
                               encoding_rate)

VERSION = 1  # of the binary audio frame, and the protocol's major version
PROTOCOL_VERSION = "1.1"  # 1.1 adds (all opt-in): timestamps, G.711/Opus, speed, per-context options, strict: false
MAGIC = b"VS"
WS_PATH = "/v1/stream"  # where the server accepts WebSocket connections
DEFAULT_PORT = 8765
DEFAULT_URL = f"ws://127.0.0.1:{DEFAULT_PORT}{WS_PATH}"  # a server on this machine with default settings
TRANSPORTS = ("binary", "base64")
MAX_LEAD_MS = 60_000  # latency_budget_ms and pacing_lead_ms
MAX_UNDERRUNS, MAX_UNDERRUN_MS = 1_000_000, 86_400_000  # per stats report: a day of stalls at most
CONTEXT_ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,64}")  # the whole id (fullmatch): no trailing newline
FLUSH_ID_MAX = 128
HEADER = struct.Struct("<2sBBII")

# Error codes: every `error` message carries one of these.
BAD_JSON = "bad_json"  # not JSON, or not a JSON object
BINARY_UNSUPPORTED = "binary_unsupported"  # the client sent a binary message
UNKNOWN_TYPE = "unknown_type"
BAD_MESSAGE = "bad_message"  # missing field, wrong type, unknown field
BAD_OPTION = "bad_option"  # a start option with an invalid value (sample rate, temperature, ...)
UNKNOWN_VOICE = "unknown_voice"
UNKNOWN_DRAFTER = "unknown_drafter"
NOT_STARTED = "not_started"  # a context message before `start`
ALREADY_STARTED = "already_started"
TEXT_TOO_LONG = "text_too_long"
BAD_TEXT = "bad_text"  # nothing speakable in a whole context
UNKNOWN_CONTEXT = "unknown_context"
TOO_MANY_CONTEXTS = "too_many_contexts"
AT_CAPACITY = "at_capacity"  # fatal: the server is full
INACTIVE = "inactive"  # fatal: nothing happened for too long
SLOW_CLIENT = "slow_client"  # fatal: the client stopped reading its messages
RATE_LIMITED = "rate_limited"  # fatal: more messages or text per second than the server allows
TOO_MANY_FROM_ADDRESS = "too_many_from_address"  # fatal: this address holds its share of sessions
INTERNAL = "internal"  # fatal: a bug in the server; the connection closes with 1011
ERROR_CODES = (BAD_JSON, BINARY_UNSUPPORTED, UNKNOWN_TYPE, BAD_MESSAGE, BAD_OPTION, UNKNOWN_VOICE, UNKNOWN_DRAFTER,
               NOT_STARTED, ALREADY_STARTED, TEXT_TOO_LONG, BAD_TEXT, UNKNOWN_CONTEXT, TOO_MANY_CONTEXTS,
               AT_CAPACITY, INACTIVE, SLOW_CLIENT, RATE_LIMITED, TOO_MANY_FROM_ADDRESS, INTERNAL)

# WebSocket close codes the server uses (1009 "message too big" is sent by the websockets library
# when a client message exceeds the size limit).
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001  # server shutting down
CLOSE_TOO_BIG = 1009
CLOSE_INTERNAL = 1011  # after an `internal` error frame
CLOSE_TRY_LATER = 1013  # at capacity
CLOSE_SLOW_CLIENT = 4000
CLOSE_INACTIVE = 4001
CLOSE_RATE_LIMITED = 4002


class ProtocolError(ValueError):
    """A client message the server rejects; becomes one ``error`` message."""

    def __init__(self, code: str, message: str, context_id: str | None = None, context_ended: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.context_id = context_id
        self.context_ended = context_ended  # the context's first text was refused: none exists


# ----------------------------------------------------------------------------- client → server


@dataclass(frozen=True)
class Start:
    """Session settings; every context on the socket uses them. None: the server's default."""

    voice: str | None = None
    sample_rate: int | None = None
    encoding: str = "pcm_s16le"
    audio_transport: str = "binary"
    sampling: dict[str, Any] = field(default_factory=dict)  # SamplingConfig overrides (options.SAMPLING_OPTIONS)
    seed: int | None = None
    latency_budget_ms: float | None = None
    drafter: str | None = None
    gamma: int | str | None = None
    tree: list[int] | list[list[int]] | str | None = None  # a static draft tree (per depth or per node), or "dynamic[:N[:D[:K]]]"
    pacing_lead_ms: float | None = None
    speed: float | None = None  # relative to the voice's own pace (voices with a duration predictor)
    word_timestamps: bool = False
    phoneme_timestamps: bool = False
    strict: bool = True  # False: unknown fields of this socket's messages are ignored, not errors
    lexicon: dict[str, str] | None = None  # pronunciations for every context: word -> IPA
    ignored: tuple[str, ...] = ()  # the unknown fields this start had (strict: false), echoed in ready

    def sampling_overrides(self) -> dict[str, Any]:
        return dict(self.sampling)


@dataclass(frozen=True)
class Text:
    """``options``: the context's own voice, speed, seed and sampling (its first text only)."""

    context_id: str
    text: str
    options: dict[str, Any] = field(default_factory=dict)
    ssml: bool = False  # text_format "ssml": the message is one whole SSML document


@dataclass(frozen=True)
class Flush:
    context_id: str
    flush_id: str | int | None = None


@dataclass(frozen=True)
class End:
    context_id: str


@dataclass(frozen=True)
class Cancel:
    context_id: str


@dataclass(frozen=True)
class ClientStats:
    """Playback report from a client (feeds the server's underrun metrics)."""

    context_id: str | None = None
    underruns: int = 0
    underrun_ms: float = 0.0


ClientMessage = Start | Text | Flush | End | Cancel | ClientStats


_KINDS = {"str": (lambda x: isinstance(x, str), "a string"), "int": (is_int, "an integer"),
          "number": (is_number, "a number"), "bool": (lambda x: isinstance(x, bool), "true or false"),
          "object": (lambda x: isinstance(x, dict), "an object")}

_SAMPLING_FIELDS = {o.name: (o.kind, False) for o in SAMPLING_OPTIONS}
CONTEXT_OPTIONS = ("voice", "speed", "seed", *_SAMPLING_FIELDS)
TEXT_FORMATS = ("text", "ssml")  # a context's first text may set these

# type -> {field: (kind, required)}
MESSAGE_FIELDS: dict[str, dict[str, tuple[str, bool]]] = {
    "start": {"voice": ("str", False), "sample_rate": ("int", False), "encoding": ("str", False),
              "audio_transport": ("str", False), "seed": ("int", False),
              "latency_budget_ms": ("number", False), "drafter": ("str", False), "gamma": ("gamma", False),
              "tree": ("tree", False), "pacing_lead_ms": ("number", False), "speed": ("number", False),
              "word_timestamps": ("bool", False), "phoneme_timestamps": ("bool", False), "strict": ("bool", False),
              "lexicon": ("object", False),
              **_SAMPLING_FIELDS},
    "text": {"context_id": ("str", True), "text": ("str", True), "text_format": ("str", False), "voice": ("str", False),
             "speed": ("number", False), "seed": ("int", False), **_SAMPLING_FIELDS},
    "flush": {"context_id": ("str", True), "flush_id": ("flush_id", False)},
    "end": {"context_id": ("str", True)},
    "cancel": {"context_id": ("str", True)},
    "stats": {"context_id": ("str", False), "underruns": ("int", False), "underrun_ms": ("number", False)},
}


def _valid(check: Any, value: Any) -> bool:
    try:
        check(value)
    except ValueError:
        return False
    return True


def _check_field(name: str, value: Any, kind: str, cid: str | None) -> None:
    if kind == "gamma":
        ok, what = _valid(check_gamma, value), "an integer >= 0 or \"auto\""
    elif kind == "tree":
        ok = isinstance(value, (list, str)) and _valid(check_tree, value)
        what = ("children per depth, e.g. [2, 2, 1] or \"2,2,1\", or per node depth by depth, e.g. [[3], [2, 1, 0]] or "
                "\"3/2,1,0\" (at most 64 nodes), or \"dynamic[:NODES[:DEPTH[:TOP_K]]]\" (greedy only)")
    elif kind == "flush_id":
        ok = (isinstance(value, str) and len(value) <= FLUSH_ID_MAX) or is_int(value)
        what = f"a string (at most {FLUSH_ID_MAX} characters) or an integer"
    else:
        check, what = _KINDS[kind]
        ok = check(value)
    if not ok:
        raise ProtocolError(BAD_MESSAGE, f"field {name!r} must be {what}, got {json.dumps(value)[:40]}", cid)


def parse_client_message(raw: str | bytes, strict: bool = True) -> ClientMessage:
    """One client WebSocket message to a typed message; :class:`ProtocolError` says what is wrong.

    Checks syntax and types only; whether a voice or drafter exists is the server's business.
    ``strict`` (the socket's ``start`` said so; a ``start`` decides for itself): unknown fields are
    errors; else they are dropped."""
    if isinstance(raw, bytes):
        raise ProtocolError(BINARY_UNSUPPORTED, "binary messages are not accepted; send JSON text messages")
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError) as e:  # ValueError: also an integer of more than 4,300 digits
        raise ProtocolError(BAD_JSON, f"message is not valid JSON ({str(e)[:200]})") from None
    if not isinstance(msg, dict):
        raise ProtocolError(BAD_JSON, "message must be a JSON object")
    kind = msg.get("type")
    cid = msg.get("context_id") if isinstance(msg.get("context_id"), str) and CONTEXT_ID_RE.fullmatch(msg["context_id"]) else None
    if not isinstance(kind, str) or kind not in MESSAGE_FIELDS:
        if kind is None:
            raise ProtocolError(BAD_MESSAGE, "message has no 'type' field", cid)
        raise ProtocolError(UNKNOWN_TYPE, f"unknown message type {json.dumps(kind)[:40]}; "
                            f"expected one of: {', '.join(MESSAGE_FIELDS)}", cid)
    spec = MESSAGE_FIELDS[kind]
    if kind == "start" and isinstance(msg.get("strict"), bool):
        strict = msg["strict"]
    unknown = sorted(set(msg) - set(spec) - {"type"})
    if unknown and strict:
        raise ProtocolError(BAD_MESSAGE, f"unknown field(s) for {kind!r}: {', '.join(unknown)} "
                            "(send \"strict\": false in start to have unknown fields ignored)", cid)
    msg = {k: v for k, v in msg.items() if k not in unknown}
    for name, (ftype, required) in spec.items():
        if name not in msg or msg[name] is None:
            if required:
                raise ProtocolError(BAD_MESSAGE, f"{kind!r} needs the field {name!r}", cid)
            continue
        _check_field(name, msg[name], ftype, cid)
    fields = {k: v for k, v in msg.items() if k != "type" and v is not None}
    if "context_id" in fields and not CONTEXT_ID_RE.fullmatch(fields["context_id"]):
        raise ProtocolError(BAD_MESSAGE, "context_id must be 1-64 characters of A-Z a-z 0-9 . _ : -", None)
    if kind == "start":
        return _parse_start(fields, tuple(unknown))
    if kind == "text":
        # their ranges are checked where they apply, on a context's first text (Session._context_options)
        options = {k: fields.pop(k) for k in CONTEXT_OPTIONS if k in fields}
        text_format = fields.pop("text_format", "text")
        if text_format not in TEXT_FORMATS:
            raise ProtocolError(BAD_MESSAGE, f"text_format must be one of {', '.join(TEXT_FORMATS)}, got "
                                f"{json.dumps(text_format)[:40]}", cid)
        return Text(**fields, options=options, ssml=text_format == "ssml")
    if kind == "stats":
        if not 0 <= fields.get("underruns", 0) <= MAX_UNDERRUNS or not 0 <= fields.get("underrun_ms", 0) <= MAX_UNDERRUN_MS:
            raise ProtocolError(BAD_MESSAGE, f"stats: underruns must be in [0, {MAX_UNDERRUNS}] and underrun_ms "
                                f"in [0, {MAX_UNDERRUN_MS}]", cid)
    return {"text": Text, "flush": Flush, "end": End, "cancel": Cancel, "stats": ClientStats}[kind](**fields)


def _parse_start(f: dict[str, Any], ignored: tuple[str, ...]) -> Start:
    def bad(msg: str) -> ProtocolError:
        return ProtocolError(BAD_OPTION, msg)

    try:
        encoding = check_encoding(f.get("encoding", "pcm_s16le"))
        if "sample_rate" in f:
            encoding_rate(encoding, check_sample_rate(f["sample_rate"]), f["sample_rate"])
        if "speed" in f:
            check_speed(f["speed"])
    except ValueError as e:
        raise bad(str(e)) from None
    if f.get("audio_transport", "binary") not in TRANSPORTS:
        raise bad(f"audio_transport must be one of {', '.join(TRANSPORTS)}, got {f['audio_transport']!r}")
    for name in ("latency_budget_ms", "pacing_lead_ms"):
        if name in f and not 0 < f[name] <= MAX_LEAD_MS:
            raise bad(f"{name} must be in (0, {MAX_LEAD_MS}], got {f[name]}")
    if "latency_budget_ms" in f and f.get("gamma", "auto") != "auto":
        raise bad("latency_budget_ms drives the adaptive draft length: leave gamma out or set it to \"auto\"")
    sampling = {o.name: f[o.name] for o in SAMPLING_OPTIONS if o.name in f}  # ranges: when the server applies them
    return Start(**{k: v for k, v in f.items() if k not in sampling}, sampling=sampling, ignored=ignored)


# ----------------------------------------------------------------------------- server → client


def message(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields}, separators=(",", ":"))


def error_message(code: str, text: str, context_id: str | None = None, fatal: bool = False,
                  context_ended: bool = False) -> str:
    """``context_ended``: the context is over (no ``done`` will follow) — the error was its end."""
    return message("error", code=code, message=text, context_id=context_id, fatal=fatal, context_ended=context_ended)


def encode_frame(context_id: str, seq: int, payload: bytes, encoding: str) -> bytes:
    cid = context_id.encode()
    n, rest = divmod(len(payload), ENCODINGS[encoding])
    if rest or not 1 <= len(cid) <= 64:
        raise ValueError("payload must be whole samples and the context id 1-64 bytes")
    pad = -len(cid) % 4
    return HEADER.pack(MAGIC, VERSION, len(cid), seq, n) + cid + b"\0" * pad + payload


@dataclass(frozen=True)
class AudioFrame:
    context_id: str
    seq: int
    n_samples: int
    payload: bytes = field(repr=False)


def decode_frame(data: bytes, encoding: str) -> AudioFrame:
    if len(data) < HEADER.size:
        raise ValueError(f"audio frame too short ({len(data)} bytes)")
    magic, version, cid_len, seq, n = HEADER.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise ValueError(f"not a v{VERSION} audio frame (magic {magic!r}, version {version})")
    start = HEADER.size + cid_len + (-cid_len % 4)
    payload = data[start:]
    if len(payload) != n * ENCODINGS[encoding]:
        raise ValueError(f"audio frame says {n} samples but carries {len(payload)} bytes of {encoding}")
    return AudioFrame(data[HEADER.size: HEADER.size + cid_len].decode(), seq, n, payload)


def audio_message(context_id: str, seq: int, payload: bytes, encoding: str) -> str:
    """The JSON form of an audio frame (``audio_transport: "base64"``)."""
    return message("audio", context_id=context_id, seq=seq, samples=len(payload) // ENCODINGS[encoding],
                   data=base64.b64encode(payload).decode())


def decode_audio_message(msg: dict[str, Any], encoding: str) -> AudioFrame:
    payload = base64.b64decode(msg["data"])
    if len(payload) != msg["samples"] * ENCODINGS[encoding]:
        raise ValueError("audio message sample count does not match its data")
    return AudioFrame(msg["context_id"], msg["seq"], msg["samples"], payload)
