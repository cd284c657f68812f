"""What a synthesis request asks for, whichever door it came in by (WebSocket ``start`` and a
context's first text, the OpenAI endpoint, Wyoming): one pure function turns it into the frozen
:class:`SynthesisOptions` the worker runs, checked against the voice and the server's limits, so
every door applies the same rules in the same words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from voicespec.engine.config import DecodeConfig
from voicespec.engine.controller import ControllerConfig
from voicespec.engine.tree_shapes import TreeSpec
from voicespec.options import encoding_rate
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve.config import ServerConfig
from voicespec.serve.encoders import check_available


class UnknownDrafter(ValueError):
    pass


@dataclass(frozen=True)
class Asked:
    """A request's choices as the client made them (None: the server's or the voice's default).
    Types are the door's to check (JSON kinds, ``protocol.py``); values and combinations are
    checked by :func:`request_options`."""

    drafter: str | None = None
    gamma: int | str | None = None
    tree: TreeSpec | None = None
    seed: int | None = None
    latency_budget_ms: float | None = None
    sampling: Mapping[str, Any] = field(default_factory=dict)  # SamplingConfig overrides
    speed: float | None = None
    encoding: str = "pcm_s16le"
    sample_rate: int | None = None
    timestamps: bool = False

    def merged(self, **overrides: Any) -> Asked:
        """These choices with a context's own on top (sampling options merged, not replaced)."""
        sampling = {**self.sampling, **overrides.pop("sampling", {})}
        return replace(self, sampling=sampling, **overrides)


def drafter_for(voice: Voice, config: ServerConfig, asked: str | None) -> str:
    """The drafter a request decodes with: its own, else the server's (where this voice has it),
    else the voice's."""
    server_default = config.drafter if config.drafter in voice.drafter_names else None
    drafter = asked or server_default or voice.config.default_drafter
    if drafter not in voice.drafter_names:
        raise UnknownDrafter(f"unknown drafter {drafter!r}; choose one of: {', '.join(voice.drafter_names)}")
    return drafter


def request_options(voice: Voice, config: ServerConfig, asked: Asked) -> SynthesisOptions:
    """The options ``asked`` decodes with on ``voice``; ValueError (:class:`UnknownDrafter` for a
    drafter the voice lacks) says what is wrong."""
    drafter = drafter_for(voice, config, asked.drafter)
    sampling = replace(voice.sampling, **asked.sampling)
    gamma = asked.gamma if asked.gamma is not None else ("auto" if asked.latency_budget_ms else config.gamma)
    if gamma != "auto" and gamma > config.max_gamma:
        raise ValueError(f"gamma must be at most {config.max_gamma} on this server, got {gamma}")
    cap = None if asked.latency_budget_ms is None else asked.latency_budget_ms / 1000
    seed = config.seed if asked.seed is None else asked.seed
    decode = DecodeConfig(sampling, gamma=gamma, max_steps=config.max_steps, seed=seed, tree=asked.tree,
                          controller=ControllerConfig(time_cap_s=cap))
    rate = encoding_rate(asked.encoding, asked.sample_rate, voice.codec.sample_rate)
    try:
        check_available(asked.encoding)
    except ImportError as e:
        raise ValueError(str(e)) from None
    options = SynthesisOptions(decode, drafter=drafter, sample_rate=rate, speed=1.0 if asked.speed is None else asked.speed,
                               timestamps=asked.timestamps)
    voice.check(options)
    return options
