"""Argument types and groups shared by the subcommands. Standard library only (plus the option
schema, itself torch-free), so ``voicespec --help`` and every argument error answer at once."""

from __future__ import annotations

import argparse
import copy
from urllib.parse import urlsplit

from voicespec.options import (DEVICE_HELP, DTYPE_HELP, ENCODINGS, GAMMA_HELP, SAMPLE_RATES, SAMPLING_OPTIONS,
                               SPEED_RANGE, check_device, check_dtype, check_speed, parse_gamma, parse_tree)
from voicespec.threads import DEFAULT_THREADS, THREADS_HELP

# The audio file formats ``say`` and ``synth`` write: :data:`voicespec.audio.FILE_FORMATS`'s
# extensions, spelled out here because that module imports torch (a test keeps the two in step).
AUDIO_FORMATS = ("wav", "flac", "ogg", "mp3")


class CliError(Exception):
    """A user error: reported as one line, exit status 2."""


def has_default(action: argparse.Action) -> bool:
    """Whether an option has a default worth printing (None, False, [] and SUPPRESS are "unset")."""
    d = action.default
    return bool(action.option_strings) and not (d is None or d is False or d is argparse.SUPPRESS or d == [])


def help_with_default(action: argparse.Action) -> str | None:
    """An option's help, ending in ``(default: ...)`` where it has a default its text does not state."""
    text = action.help or ""
    if text == argparse.SUPPRESS or not has_default(action) or "(default" in text:
        return action.help
    return f"{text} (default: %(default)s)".lstrip()


class HelpFormatter(argparse.HelpFormatter):
    """``--help`` shows every option's default, also for an option with no help text of its own."""

    def _format_action(self, action: argparse.Action) -> str:
        text = help_with_default(action)
        if text != action.help:
            action = copy.copy(action)
            action.help = text
        return super()._format_action(action)


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kw) -> None:
        kw.setdefault("formatter_class", HelpFormatter)  # subcommands' parsers too
        super().__init__(*args, **kw)

    def error(self, message: str) -> None:  # one line instead of usage + traceback
        raise CliError(message)


def _typed(convert, what: str):
    """An argparse type whose error message is the converter's own (one line)."""
    def parse(value: str):
        try:
            return convert(value)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e) or f"expected {what}, got {value!r}") from None
    parse.__name__ = what
    return parse


gamma_arg = _typed(parse_gamma, "gamma")
tree_arg = _typed(parse_tree, "tree")
TREE_HELP = ("draft a tree every step and verify it in one pass: static, children per depth, e.g. 2,2,1, or per "
             "node depth by depth, e.g. 3/2,1,0/2,1,1, or dynamic[:NODES[:DEPTH[:TOP_K]]] grown from the draft's "
             "confidence (greedy only) "
             "(drafters that draft trees: the feature heads)")
device_arg = _typed(check_device, "device")
dtype_arg = _typed(check_dtype, "dtype")


def _ids(value: str) -> list[int]:
    try:
        return [int(x) for x in value.replace(",", " ").split()]
    except ValueError:
        raise ValueError(f"expected comma-separated integer ids, got {value!r}") from None


ids_arg = _typed(_ids, "ids")


def names_arg(allowed: tuple[str, ...], what: str):
    """A comma-separated subset of ``allowed``, kept in the order given."""
    def parse(value: str) -> tuple[str, ...]:
        names = tuple(x for x in value.replace(",", " ").split())
        unknown = [x for x in names if x not in allowed]
        if unknown or not names:
            raise ValueError(f"{what} must be some of {', '.join(allowed)}, got {value!r}")
        return names
    return _typed(parse, what)


def _port(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise ValueError(f"port must be an integer 0-65535, got {value!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"port must be 0-65535 (0: any free port), got {port}")
    return port


port_arg = _typed(_port, "port")


def _door_port(text: str) -> int | None:
    """A door's port, or ``off``."""
    return None if text == "off" else _port(text)


door_port_arg = _typed(_door_port, "port")


def _speed(value: str) -> float:
    try:
        speed = float(value)
    except ValueError:
        speed = value  # not a number: check_speed says so
    return check_speed(speed)


speed_arg = _typed(_speed, "speed")
SPEED_HELP = (f"speaking speed, {SPEED_RANGE[0]:g} to {SPEED_RANGE[1]:g} times the voice's own pace; "
              "other than 1 only for a voice with a duration predictor")


def _ws_url(value: str) -> str:
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 — raises ValueError on a bad port
    except ValueError as e:
        raise ValueError(f"bad server URL {value!r}: {e}") from None
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ValueError(f"server URL must look like ws://HOST:PORT/v1/stream, got {value!r}")
    return value


ws_url_arg = _typed(_ws_url, "url")


def _sample_rate(value: str) -> int:
    try:
        rate = int(value)
    except ValueError:
        rate = None
    if rate not in SAMPLE_RATES:
        raise ValueError(f"sample rate must be one of {', '.join(map(str, SAMPLE_RATES))}, got {value!r}")
    return rate


sample_rate_arg = _typed(_sample_rate, "rate")


def positive(kind: type, name: str, allow_zero: bool = False):
    def parse(value: str):
        try:
            x = kind(value)
        except ValueError:
            raise ValueError(f"{name} must be a number, got {value!r}") from None
        if not (x >= 0 if allow_zero else x > 0) or x != x:
            raise ValueError(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value}")
        return x
    return _typed(parse, name)


def add_sampling_args(p: argparse.ArgumentParser, unset: str = "the voice's") -> None:
    """One flag per :class:`~voicespec.engine.config.SamplingConfig` field; unset flags stay None
    so ``unset``'s settings apply (the voice's; the engine's own defaults for ``generate``)."""
    for opt in SAMPLING_OPTIONS:
        text = opt.help or opt.name.replace("_", " ")
        p.add_argument(opt.flag, type=opt.type, choices=opt.choices or None,
                       help=text if "(default" in text else f"{text} (default: {unset})")


def add_decoding_args(p: argparse.ArgumentParser, gamma_default: int | str = "auto", unset: str = "the voice's") -> None:
    p.add_argument("--gamma", type=gamma_arg, default=gamma_default, help=GAMMA_HELP)
    p.add_argument("--no-spec", action="store_true", help="plain decoding (same as --gamma 0)")
    p.add_argument("--tree", type=tree_arg, help=TREE_HELP)
    add_sampling_args(p, unset)
    p.add_argument("--seed", type=int, default=0, help="sampling seed (sentence i is seeded with SEED + i)")
    p.add_argument("--max-steps", type=positive(int, "max steps"), default=2000,
                   help="decode steps at most per sentence (a runaway guard)")


def add_device_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", type=device_arg, default="auto", help=DEVICE_HELP)
    p.add_argument("--dtype", type=dtype_arg, default="float32", help=DTYPE_HELP)


def add_threads_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=positive(int, "threads", allow_zero=True), default=DEFAULT_THREADS, help=THREADS_HELP)


def add_voice_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "--voice", dest="model", help="voice folder or name under models/ (default: the default voice)")
    add_device_args(p)
    add_threads_arg(p)
    p.add_argument("--drafter", help="none, ngram or a draft model shipped with the voice (default: the voice's)")
    p.add_argument("--sample-rate", type=sample_rate_arg,
                   help=f"output rate: {', '.join(map(str, SAMPLE_RATES))} (default: the codec's)")


TEXT_HELP = "the text; '-' or none (with stdin not a terminal): read it from stdin"
WAIT_S = 15.0  # the client's default wait for a server that is still starting


def add_client_args(p: argparse.ArgumentParser, default_url: str) -> None:
    p.add_argument("text", nargs="?", help=TEXT_HELP)
    p.add_argument("-o", "--output", required=True, help="output audio file, by extension: "
                   f"{', '.join('.' + f for f in AUDIO_FORMATS)} (written atomically; its folder must exist), "
                   "or '-' for stdout (wav)")
    p.add_argument("--url", type=ws_url_arg, default=default_url, help="server WebSocket URL")
    p.add_argument("--wait-s", type=positive(float, "wait seconds", allow_zero=True), default=WAIT_S,
                   help="while the connection is refused (a server still starting: `voicespec serve &` loads its "
                        "voice first), retry for up to this many seconds before giving up; 0: try once")
    p.add_argument("--api-key", help="API key (sent as Authorization: Bearer)")
    p.add_argument("--token", help="a short-lived token from the server's GET /v1/token, instead of the key")
    p.add_argument("--sample-rate", type=sample_rate_arg,
                   help=f"output rate: {', '.join(map(str, SAMPLE_RATES))} (default: the voice's; mulaw/alaw: 8000)")
    p.add_argument("--encoding", choices=list(ENCODINGS), default="pcm_s16le",
                   help="encoding of the streamed audio: PCM, G.711 mulaw/alaw (8 kHz) or opus (Ogg); the file "
                        "written is decoded from it")
    p.add_argument("--speed", type=float, help="speaking speed, 0.5-2 (default: 1, the voice's own pace)")
    p.add_argument("--word-timestamps", action="store_true", help="ask for word timestamps and print them")
    p.add_argument("--prebuffer-ms", type=positive(float, "prebuffer", allow_zero=True), default=200.0,
                   help="playout simulation: audio buffered before playback starts")
    p.add_argument("--words-per-message", type=positive(int, "words per message", allow_zero=True), default=0,
                   help="send the text in pieces of this many words, as an LLM would stream it (0: all at once)")
    p.add_argument("--voice", help="a voice the server has (default: the server's default voice)")
    p.add_argument("--drafter", help="none, ngram or a draft model of the voice (default: the server's)")
    p.add_argument("--gamma", type=gamma_arg, help=f"{GAMMA_HELP} (default: the server's)")
    p.add_argument("--latency-budget-ms", type=positive(float, "latency budget"),
                   help="per-step latency budget (adaptive draft length) (default: none)")
    add_sampling_args(p, "the server's voice's")
    p.add_argument("--seed", type=int, help="sampling seed (default: none: not reproducible)")
