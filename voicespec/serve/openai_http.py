"""The OpenAI-compatible door: ``POST /v1/audio/speech`` and ``GET /v1/models``, so the official
``openai`` SDK (and every tool built on it) speaks through voicespec unchanged.

An HTTP server of its own (aiohttp, the ``serve`` extra) on its own port, in the server's
process and event loop: the same voices, decode worker, limits, metrics and API key as the
WebSocket protocol. A request is one :class:`~voicespec.serve.utterance.Utterance`; its audio goes
out with chunked transfer as frames are made (``stream_format: "audio"``) or as server-sent events
(``"sse"``). What OpenAI's API has and we do not (``instructions``) is accepted and ignored;
our own options come in ``extra_body`` (seed, drafter, gamma, latency budget, sampling).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from voicespec.checks import is_int, is_number
from voicespec.engine.config import MAX_SEED
from voicespec.frontend.lexicon import LexiconError
from voicespec.frontend.ssml import is_ssml
from voicespec.frontend.text import TextError
from voicespec.engine.controller import check_gamma
from voicespec.options import SAMPLING_OPTIONS, check_sample_rate, sampling_overrides
from voicespec.serve.door import AtCapacity, Door, UnknownVoice
from voicespec.serve.encoders import WavStreamEncoder, check_available, make_encoder
from voicespec.serve.http import authorized
from voicespec.serve.requests import Asked, UnknownDrafter, request_options
from voicespec.serve.utterance import SynthesisFailed, Utterance
from voicespec.serve.voices import VoiceLoadError

log = logging.getLogger("voicespec.server")

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


class OpenAIFront(Door):
    """The aiohttp application."""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors], client_max_size=64 * 1024)
        app.router.add_post("/v1/audio/speech", self.speech)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/v1/models/{model}", self.model)
        return app

    @web.middleware
    async def _errors(self, request: web.Request, handler: Callable) -> web.StreamResponse:
        """Every failure in OpenAI's error shape; and the API key, checked before anything else."""
        try:
            if not authorized(request, parse_qs(request.query_string), self.config.api_key):
                raise ApiError(401, "missing, wrong or expired API key (Authorization: Bearer KEY)", code="invalid_api_key")
            return await handler(request)
        except ApiError as e:
            self.metrics.error(e.code or e.kind)
            return e.response()
        except web.HTTPException as e:  # aiohttp's own: no such route, wrong method, body too large
            if e.status == 413:
                return ApiError(413, "the request body is too large", code="request_too_large").response()
            return ApiError(e.status, f"{request.method} {request.path}: {e.reason}", code=e.reason.lower().replace(" ", "_")
                            ).response()

    async def models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model(m) for m in MODELS]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in MODELS:
            raise ApiError(404, f"no model {name!r}; models: {', '.join(MODELS)}", "model", "model_not_found")
        return web.json_response(self._model(name))

    @staticmethod
    def _model(name: str) -> dict:
        return {"id": name, "object": "model", "created": 0, "owned_by": "voicespec"}

    async def speech(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError):
            raise ApiError(400, "the request body is not JSON") from None
        req = parse_speech(body, self.voices.names)
        try:
            check_available(req.response_format if req.response_format not in ("wav", "pcm") else "pcm_s16le")
        except ImportError as e:
            raise ApiError(400, str(e), "response_format") from None
        try:
            voice = await self.voice(req.voice)
        except (UnknownVoice, VoiceLoadError) as e:
            raise ApiError(400, str(e), "voice") from None
        try:
            options = request_options(voice, self.config, req.asked)
        except UnknownDrafter as e:
            raise ApiError(400, str(e), "drafter") from None
        except ValueError as e:
            raise ApiError(400, str(e)) from None
        try:
            utterance = self.open(voice, options)
        except AtCapacity as e:
            raise ApiError(429, str(e), code="at_capacity", kind="rate_limit_error") from None
        try:
            try:
                if is_ssml(req.input) or req.lexicon:
                    await utterance.add_markup(req.input, lexicon=req.lexicon)
                else:
                    await utterance.add(req.input)
                await utterance.end()
            except TextError as e:
                in_lexicon = isinstance(e, LexiconError) and not is_ssml(req.input)
                raise ApiError(400, str(e), "lexicon" if in_lexicon else "input") from None
            return await self._respond(request, req, utterance, options.sample_rate)
        finally:
            utterance.cancel("disconnected")  # a no-op once it has finished

    async def _respond(self, request: web.Request, req: SpeechRequest, utterance: Utterance,
                       rate: int) -> web.StreamResponse:
        """The audio as it is made: chunked bytes of the format, or server-sent events."""
        fmt = req.response_format
        encoder = WavStreamEncoder(rate) if fmt == "wav" else make_encoder("pcm_s16le" if fmt == "pcm" else fmt, rate)
        sse = req.stream_format == "sse"
        response = web.StreamResponse(headers={
            "Content-Type": "text/event-stream" if sse else FORMATS[fmt], "Cache-Control": "no-store",
            "X-Voicespec-Sample-Rate": str(rate), "X-Voicespec-Voice": utterance.voice.name,
            **({"X-Voicespec-Ignored-Fields": ",".join(req.ignored)} if req.ignored else {})})
        response.enable_chunked_encoding()
        t0 = time.perf_counter()
        started = False

        async def send(data: bytes) -> None:
            nonlocal started
            if not data:
                return
            if not started:
                await response.prepare(request)
                started = True
            if sse:
                event = {"type": "speech.audio.delta", "audio": base64.b64encode(data).decode()}
                data = f"data: {json.dumps(event)}\n\n".encode()
            await response.write(data)

        try:
            try:
                async for item in utterance.items():
                    pcm = getattr(item, "pcm", None)
                    if pcm is not None:
                        await send(encoder.encode(pcm))
            except SynthesisFailed as e:
                log.error("OpenAI speech request failed: %s", e)
                if not started:
                    raise ApiError(500, "synthesis failed", kind="server_error") from None
                return response  # mid-stream: the truncated body is all a client can be told
            await send(encoder.finish())
            if not response.prepared:
                await response.prepare(request)
            if sse:
                stats = utterance.stats or {}
                done = {"type": "speech.audio.done",
                        "usage": {"input_tokens": len(req.input), "output_tokens": stats.get("frames", 0),
                                  "total_tokens": len(req.input) + stats.get("frames", 0)},
                        "voicespec": {**stats, "wall_s": round(time.perf_counter() - t0, 4)}}
                await response.write(f"data: {json.dumps(done)}\n\n".encode())
            await response.write_eof()
        except ConnectionResetError:  # the client hung up mid-stream: speech() cancels its utterance
            pass
        return response
