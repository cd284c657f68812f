"""The WebSocket door's handshake: a connection's ``start`` checked into the options every context
begins from, the ``ready`` it is answered with, and a context's own options (on its first
``text``) over them. Pure of sockets: the session sends what these return, and raises what they
raise as the protocol's errors."""

from __future__ import annotations

from dataclasses import dataclass, replace

from voicespec.options import SAMPLING_OPTIONS
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve import protocol as P
from voicespec.serve.config import ServerConfig
from voicespec.serve.requests import Asked, UnknownDrafter, request_options
from voicespec.serve.voices import VoiceSet


@dataclass(frozen=True)
class Started:
    """What a connection's ``start`` settled: the message, what it asked (a context's first text may
    override some of it), the options and voice that follow, and its pacing lead."""

    msg: P.Start
    asked: Asked
    options: SynthesisOptions
    voice: Voice
    pacing_lead_s: float | None


def voice_named(voices: VoiceSet, name: str | None, cid: str | None = None) -> Voice:
    """A loaded voice by name (None: the default). For a context (``cid``) an unknown one refuses
    its first text, so no context is left behind."""
    voice = voices.loaded(name)
    if voice is None:
        raise P.ProtocolError(P.UNKNOWN_VOICE, f"unknown voice {name!r}; this server speaks "
                              f"{', '.join(voices.names)} (GET /v1/voices)", cid, context_ended=cid is not None)
    return voice


def start(msg: P.Start, voices: VoiceSet, cfg: ServerConfig) -> Started:
    """``start`` checked: its voice, drafter, options and lexicon, or the protocol error that says
    which is wrong."""
    voice = voice_named(voices, msg.voice)
    asked = Asked(drafter=msg.drafter, gamma=msg.gamma, tree=msg.tree, seed=msg.seed,
                  latency_budget_ms=msg.latency_budget_ms, sampling=msg.sampling_overrides(), speed=msg.speed,
                  encoding=msg.encoding, sample_rate=msg.sample_rate,
                  timestamps=msg.word_timestamps or msg.phoneme_timestamps)
    try:
        options = request_options(voice, cfg, asked)
        if msg.lexicon is not None:
            voice.script("a", lexicon=msg.lexicon)  # every entry is a pronunciation this voice can say
    except UnknownDrafter as e:
        raise P.ProtocolError(P.UNKNOWN_DRAFTER, str(e)) from None
    except ValueError as e:
        raise P.ProtocolError(P.BAD_OPTION, str(e)) from None
    lead = cfg.pacing_lead_s if msg.pacing_lead_ms is None else msg.pacing_lead_ms / 1000
    return Started(msg, asked, options, voice, lead)


def ready_message(st: Started, cfg: ServerConfig, voices: VoiceSet) -> str:
    """The ``ready`` that answers ``start``: every setting as the server will use it."""
    msg, options, decode = st.msg, st.options, st.options.decode
    return P.message(
        "ready", protocol=P.VERSION, protocol_version=P.PROTOCOL_VERSION, voice=st.voice.name,
        sample_rate=options.sample_rate, channels=1, encoding=msg.encoding, audio_transport=msg.audio_transport,
        drafter=options.drafter, gamma=decode.gamma, latency_budget_ms=msg.latency_budget_ms, seed=msg.seed,
        pacing_lead_ms=None if st.pacing_lead_s is None else st.pacing_lead_s * 1000,
        sampling={o.name: getattr(decode.sampling, o.name) for o in SAMPLING_OPTIONS}, speed=options.speed,
        word_timestamps=msg.word_timestamps, phoneme_timestamps=msg.phoneme_timestamps, strict=msg.strict,
        ignored_fields=list(msg.ignored), max_text_chars=cfg.max_text_chars, drafters=st.voice.drafter_names,
        voices=voices.names)


def context_options(st: Started, voices: VoiceSet, cfg: ServerConfig, msg: P.Text) -> tuple[Voice, SynthesisOptions]:
    """A new context's voice and options: the connection's, with its first text's own on top (a
    drafter the other voice lacks gives way to that voice's default)."""
    if not msg.options:
        return st.voice, st.options
    o = dict(msg.options)
    cid = msg.context_id
    voice = voice_named(voices, o.pop("voice"), cid) if "voice" in o else st.voice
    own = {k: o.pop(k) for k in list(o) if k not in ("speed", "seed")}
    asked = st.asked.merged(sampling=own, **o)
    if asked.drafter not in voice.drafter_names:
        asked = replace(asked, drafter=None)
    try:
        return voice, request_options(voice, cfg, asked)
    except ValueError as e:
        raise P.ProtocolError(P.BAD_OPTION, str(e), cid, context_ended=True) from None
