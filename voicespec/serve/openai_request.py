"""An OpenAI ``POST /v1/audio/speech`` body, checked: what it asks for, as our request options,
or an :class:`ApiError` in OpenAI's error shape naming the first field that is wrong. Pure: no
server, no voice (which voice names exist is passed in)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from voicespec.checks import is_int, is_number
from voicespec.engine.config import MAX_SEED
from voicespec.engine.controller import check_gamma
from voicespec.options import SAMPLING_OPTIONS, check_sample_rate, sampling_overrides
from voicespec.serve.requests import Asked

MAX_INPUT_CHARS = 4096  # OpenAI's limit
SPEED_RANGE = (0.25, 4.0)  # OpenAI's range; a voice speaks what its duration predictor allows (options.SPEED_RANGE)
OPENAI_RATE = 24000  # every OpenAI format is 24 kHz mono; `pcm` is raw s16le at this rate
FORMATS = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac", "wav": "audio/wav",
           "pcm": "audio/pcm"}
# OpenAI's voice names reach our default voice (a client written for OpenAI works unchanged);
# our own voice names reach those voices.
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
                 "marin", "cedar")
MODELS = ("voicespec", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # accepted names; all speak with this server's engine
EXTRA_FIELDS = ("seed", "drafter", "gamma", "latency_budget_ms", "sample_rate", "lexicon",
                *(o.name for o in SAMPLING_OPTIONS))
KNOWN_FIELDS = ("model", "input", "voice", "response_format", "speed", "instructions", "stream_format", *EXTRA_FIELDS)


class ApiError(Exception):
    """An error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def response(self) -> web.Response:
        body = {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}
        return web.json_response(body, status=self.status)


@dataclass(frozen=True)
class SpeechRequest:
    """A ``POST /v1/audio/speech`` body, checked (:func:`parse_speech`)."""

    input: str
    voice: str | None  # ours, or None: the default voice (an OpenAI voice name)
    response_format: str
    stream_format: str
    asked: Asked
    ignored: tuple[str, ...]
    lexicon: dict[str, str] | None = None  # word -> IPA, over the voice's own


def _field(body: dict, name: str, ok: Callable[[Any], bool], what: str, default: Any = None) -> Any:
    value = body.get(name, default)
    if value is not None and not ok(value):
        raise ApiError(400, f"{name!r} must be {what}, got {json.dumps(value)[:40]}", name)
    return value


def parse_speech(body: Any, voice_names: list[str]) -> SpeechRequest:
    """The request a JSON body asks for; ApiError (400) names the first field that is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    is_str = lambda x: isinstance(x, str)  # noqa: E731
    _field(body, "model", is_str, "a string")
    text = _field(body, "input", is_str, "a string")
    if not text or not text.strip():
        raise ApiError(400, "'input' is required: the text to speak", "input", "missing_required_parameter")
    if len(text) > MAX_INPUT_CHARS:
        raise ApiError(400, f"'input' has {len(text)} characters; the limit is {MAX_INPUT_CHARS}", "input",
                       "string_above_max_length")
    voice = body.get("voice")
    if isinstance(voice, dict):  # the newer API's {"id": "..."} form
        voice = voice.get("id")
    if voice is None or not isinstance(voice, str):
        raise ApiError(400, "'voice' is required: one of " + ", ".join([*voice_names, *OPENAI_VOICES]), "voice")
    if voice not in voice_names:
        if voice.lower() not in OPENAI_VOICES:
            raise ApiError(400, f"unknown voice {voice!r}; this server speaks {', '.join(voice_names)} (OpenAI's "
                           f"names, {', '.join(OPENAI_VOICES)}, reach the default voice)", "voice")
        voice = None
    fmt = _field(body, "response_format", lambda x: x in FORMATS, "one of " + ", ".join(FORMATS), "mp3")
    stream = _field(body, "stream_format", lambda x: x in ("audio", "sse"), "'audio' or 'sse'", "audio")
    speed = _field(body, "speed", is_number, "a number")
    if speed is not None and not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise ApiError(400, f"'speed' must be in [{SPEED_RANGE[0]}, {SPEED_RANGE[1]}], got {speed}", "speed")
    _field(body, "instructions", is_str, "a string")
    seed = _field(body, "seed", lambda x: is_int(x) and 0 <= x <= MAX_SEED, f"an integer in [0, {MAX_SEED}]")
    drafter = _field(body, "drafter", is_str, "a string")
    gamma = body.get("gamma")
    if gamma is not None:
        try:
            check_gamma(gamma)
        except ValueError as e:
            raise ApiError(400, str(e), "gamma") from None
    budget = _field(body, "latency_budget_ms", lambda x: is_number(x) and x > 0, "a number > 0")
    rate = _field(body, "sample_rate", lambda x: _rate_ok(x), "an output sample rate", OPENAI_RATE)
    try:
        sampling = sampling_overrides(body)
    except ValueError as e:
        raise ApiError(400, str(e)) from None
    asked = Asked(drafter=drafter, gamma=gamma, seed=seed, latency_budget_ms=budget, sampling=sampling,
                  speed=None if speed is None or speed == 1 else float(speed), sample_rate=rate)
    lexicon = _field(body, "lexicon", lambda x: isinstance(x, dict), "an object of word -> IPA")
    ignored = tuple(sorted(k for k in body if k not in KNOWN_FIELDS))
    return SpeechRequest(text, voice, fmt, stream, asked, ignored, lexicon)


def _rate_ok(rate: Any) -> bool:
    try:
        check_sample_rate(rate)
        return True
    except ValueError:
        return False
