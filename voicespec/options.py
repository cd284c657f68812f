"""The options a request may set, defined once: the CLI flags, the batch JSONL keys and the
protocol's ``start`` fields are all derived from here and from :class:`SamplingConfig`'s fields.

Standard library only, so building the command line's parser imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from voicespec.checks import is_int, is_number
from voicespec.engine.config import SamplingConfig
from voicespec.engine.controller import check_gamma
from voicespec.engine.tree_shapes import TreeSpec, check_tree

SAMPLE_RATES = (8000, 16000, 22050, 24000, 44100, 48000)  # output rates a request may ask for
SPEED_RANGE = (0.5, 2.0)  # speaking speed relative to the voice's own (durations divided by it)
# Streamed audio encodings: bytes per unit of an audio frame's count. PCM and G.711 count
# samples; ``opus`` (an Ogg Opus stream, cut where its pages end) counts bytes.
ENCODINGS = {"pcm_s16le": 2, "f32le": 4, "mulaw": 1, "alaw": 1, "opus": 1}
ENCODING_RATES = {"mulaw": (8000,), "alaw": (8000,), "opus": (8000, 16000, 24000, 48000)}  # where not any rate
GAMMA_HELP = "draft length per step (an integer >= 0), or 'auto' for the adaptive controller"
DTYPES = ("float32", "bfloat16", "float16")  # the LM's weights and KV cache; the codec stays float32
DEVICE_HELP = "where the LM and the codec run: auto (the GPU if there is one), cpu, cuda, cuda:N (default auto)"
DTYPE_HELP = f"LM weights and KV cache: {', '.join(DTYPES)} (default float32; bfloat16 pays on GPUs, not on CPUs)"


def check_device(device: Any) -> str:
    """A device name torch understands, checked without importing torch: auto, cpu, cuda[:N], mps."""
    if isinstance(device, str) and (device in ("auto", "cpu", "cuda", "mps") or
                                    (device.startswith("cuda:") and device[5:].isdigit())):
        return device
    raise ValueError(f"device must be auto, cpu, cuda, cuda:N or mps, got {device!r}")


def check_dtype(dtype: Any) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    return dtype


def parse_gamma(text: str) -> int | str:
    """γ as typed on a command line or a URL (``"4"``, ``"auto"``)."""
    try:
        value: int | str = text if text == "auto" else int(text)
    except ValueError:
        value = text  # not a number: check_gamma says so
    return check_gamma(value)


def parse_tree(text: str) -> TreeSpec:
    """A draft tree as typed on a command line: children per depth, ``"2,2,1"`` (or ``2x2x1``),
    children per node depth by depth, ``"3/2,1,0/1,1,1"``, or a dynamic one,
    ``"dynamic[:NODES[:DEPTH[:TOP_K]]]"`` (greedy only)."""
    return check_tree(text)


def check_sample_rate(rate: Any) -> int:
    if not is_int(rate) or rate not in SAMPLE_RATES:
        raise ValueError(f"sample_rate must be one of {', '.join(map(str, SAMPLE_RATES))}, got {rate!r}")
    return rate


def check_speed(speed: Any) -> float:
    lo, hi = SPEED_RANGE
    if not is_number(speed) or not lo <= speed <= hi:
        raise ValueError(f"speed must be a number in [{lo:g}, {hi:g}] (1 = the voice's own pace), got {speed!r}")
    return float(speed)


def check_encoding(encoding: Any) -> str:
    if encoding not in ENCODINGS:
        raise ValueError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    return encoding


def encoding_rate(encoding: str, rate: int | None, default: int) -> int:
    """The output rate for ``encoding`` when ``rate`` is asked for (None: ``default``, or the
    encoding's own: 8 kHz for G.711, 48 kHz for Opus); ValueError if the encoding cannot carry it."""
    allowed = ENCODING_RATES.get(encoding)
    if rate is None:
        rate = default if allowed is None or default in allowed else allowed[-1]
    if allowed is not None and rate not in allowed:
        raise ValueError(f"encoding {encoding!r} carries sample_rate {', '.join(map(str, allowed))} only, got {rate}")
    return rate


@dataclass(frozen=True)
class Option:
    """One request option: its name (a dataclass field), value type and help text."""

    name: str
    type: type  # int, float, or str (one of ``choices``)
    help: str
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    def accepts(self, value: Any) -> bool:
        """JSON type check (range checks are the dataclass's own)."""
        if self.type is str:
            return isinstance(value, str)
        return is_int(value) if self.type is int else is_number(value)

    @property
    def kind(self) -> str:
        """The JSON kind, as protocol messages are checked (``serve/protocol.py``) and errors say it."""
        return {int: "int", float: "number", str: "str"}[self.type]

    @property
    def described(self) -> str:
        return {int: "an integer", float: "a number", str: "a string"}[self.type]


def options_of(cls: type) -> tuple[Option, ...]:
    """The options of a config dataclass whose fields carry ``metadata={"help": ...}``."""
    out = []
    for f in fields(cls):
        kind = {"int": int, "float": float, "str": str}[f.type if isinstance(f.type, str) else f.type.__name__]
        out.append(Option(f.name, kind, f.metadata.get("help", ""), tuple(f.metadata.get("choices", ()))))
    return tuple(out)


SAMPLING_OPTIONS = options_of(SamplingConfig)


def sampling_overrides(values: dict[str, Any]) -> dict[str, Any]:
    """The sampling options present (not None) in ``values``, type-checked; ValueError names the
    first bad one. Range checks happen when they are applied (``SamplingConfig.__post_init__``)."""
    out = {}
    for opt in SAMPLING_OPTIONS:
        value = values.get(opt.name)
        if value is None:
            continue
        if not opt.accepts(value):
            raise ValueError(f"{opt.name!r} must be {opt.described}, got {value!r}")
        out[opt.name] = value
    return out
