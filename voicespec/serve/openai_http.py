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
from urllib.parse import parse_qs

from aiohttp import web

from voicespec.frontend.lexicon import LexiconError
from voicespec.frontend.ssml import is_ssml
from voicespec.frontend.text import TextError
from voicespec.serve.door import AtCapacity, Door, UnknownVoice
from voicespec.serve.encoders import WavStreamEncoder, check_available, make_encoder
from voicespec.serve.http import authorized
from voicespec.serve.openai_request import FORMATS, MODELS, ApiError, SpeechRequest, parse_speech
from voicespec.serve.requests import UnknownDrafter, request_options
from voicespec.serve.utterance import SynthesisFailed, Utterance
from voicespec.serve.voices import VoiceLoadError

log = logging.getLogger("voicespec.server")

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
            except AtCapacity as e:  # turned away while it waited for a place (before any audio)
                if not started:
                    raise ApiError(429, str(e), code="at_capacity", kind="rate_limit_error") from None
                return response
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
