"""The ``voicespec`` command line. Bad arguments give one ``voicespec: error: ...`` line, exit 2.

Lazy by design: building the parser imports no torch or transformers. Every command's arguments
come from light modules (:mod:`.args`, :mod:`.train`, :mod:`.evaluate`, :mod:`.bench`)
whose defaults are standard-library dataclasses; the work runs in the command's own module,
imported when it runs.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import sys
from collections.abc import Callable, Sequence

from voicespec.bench import STRESS_PHASES
from voicespec.cli import bench as B
from voicespec.cli import args as A
from voicespec.cli.args import CliError, Parser
from voicespec.cli import evaluate as E
from voicespec.cli import train as T
from voicespec.serve.config import OPENAI_PORT, WYOMING_PORT, ServerConfig
from voicespec.serve.protocol import DEFAULT_URL, PROTOCOL_VERSION


def _run(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A handler imported when it runs, not when the parser is built."""
    def run(args: argparse.Namespace) -> int:
        return getattr(importlib.import_module(module), name)(args)
    return run


def _cmd(name: str) -> Callable[[argparse.Namespace], int]:
    return _run("voicespec.cli.commands", name)


# Training recipes: (name, help, arguments in voicespec.cli.train, recipe module, run function).
TRAIN_RECIPES = (
    ("data", "regenerate the teacher corpus (needs the `train` extra: piper-tts)", "add_data_args", "voicespec.train.data", "run_data"),
    ("codec", "train (or resume) the codec on a teacher corpus", "add_codec_args", "voicespec.train.codec", "run_codec"),
    ("asr", "train (or resume) the CTC character recognizer (alignment, CER) on a teacher corpus", "add_asr_args", "voicespec.train.asr", "run_asr"),
    ("duration", "train the duration predictor on aligned (ids, frames) items from `train lm`", "add_duration_args", "voicespec.train.duration", "run_duration"),
    ("lm", "prepare (encode + align) the corpus and train (or resume) the codec LM target", "add_lm_args", "voicespec.train.lm", "run_lm"),
    ("draft", "distil a draft model from the target's first layers", "add_draft_args", "voicespec.train.lm", "run_draft"),
    ("features", "distil feature-level (EAGLE-style) or Medusa draft heads on the target's own samples", "add_features_args", "voicespec.train.features", "run_features"),
    ("fine", "distil a fine stage that completes a verify pass's frames at once (reads no previous frame)", "add_fine_args", "voicespec.train.fine", "run_fine"),
    ("ship-codec", "copy an exported codec into a voice folder with its model card and samples", "add_ship_codec_args", "voicespec.train.card", "run_ship_codec"),
    ("ship", "assemble a voice folder from finished runs, with model cards", "add_ship_args", "voicespec.train.ship", "run_ship"),
)


def build_parser() -> Parser:
    parser = Parser(prog="voicespec", description="Real-time speech synthesis from codec LMs, made fast by lossless speculative decoding.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("demo", help="plain vs speculative decoding on tiny built-in models, checked token for token")
    p.add_argument("--quick", action="store_true", help="fewer prompts")
    p.add_argument("--wav", default="out/demo.wav", help="where the pipeline demo writes its audio")
    p.set_defaults(func=_cmd("cmd_demo"))

    p = sub.add_parser("say", help="synthesize one text to an audio file (or stdout)",
                       description="Synthesize TEXT of any length (long text is spoken sentence by sentence) to "
                                   "an audio file, to stdout, or as raw PCM while it is made (--output-raw).")
    p.add_argument("text", nargs="?", help=A.TEXT_HELP)
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("-o", "--output",
                     help=f"output file ({', '.join('.' + f for f in A.AUDIO_FORMATS)}), or '-' for stdout; its folder must exist")
    out.add_argument("--output-raw", action="store_true",
                     help="stream raw audio to stdout as it is made, chunk by chunk: 16-bit signed little-endian "
                          "mono PCM (s16le) at the output rate (--sample-rate, else the codec's; stated on stderr), "
                          "e.g. | aplay -r 24000 -f S16_LE -c 1")
    p.add_argument("--format", choices=A.AUDIO_FORMATS,
                   help="audio format (default: by the output's extension; wav for stdout)")
    A.add_voice_args(p)
    p.add_argument("--speed", type=A.speed_arg, default=1.0, help=A.SPEED_HELP)
    p.add_argument("--ssml", action="store_true", help="TEXT is SSML (also assumed when its root is <speak>): "
                   "break, say-as, sub, phoneme, prosody rate, p, s")
    p.add_argument("--lexicon", help="pronunciations to use: a JSON file of word -> IPA, or a PLS lexicon (.pls)")
    p.add_argument("--dump-tokens", help="write the generated code frames as JSON here")
    A.add_decoding_args(p)
    p.set_defaults(func=_cmd("cmd_say"))

    p = sub.add_parser("synth", help="batch: a text file (one utterance per line) or JSONL to audio files")
    p.add_argument("input", help="text file, or .jsonl with id, text[, voice, seed, speed, temperature, top_k, ...]")
    p.add_argument("-o", "--output", required=True, help="output folder (made if missing)")
    p.add_argument("--format", choices=A.AUDIO_FORMATS, default="wav", help="audio format of every file")
    p.add_argument("--resume", action="store_true",
                   help="skip ids already written (journalled in progress.jsonl, file present); retry failed ones")
    A.add_voice_args(p)
    p.add_argument("--speed", type=A.speed_arg, default=1.0, help=f"{A.SPEED_HELP}; a line's 'speed' overrides it")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run on Ray Data: a cluster's address (ray://HOST:10001 or auto), or none for a local Ray "
                        "on this machine's cores (needs the `cluster` extra); same files as without")
    p.add_argument("--ray-workers", type=A.positive(int, "ray workers"),
                   help="voice-holding actors, one CPU each (default: the cluster's CPUs)")
    A.add_decoding_args(p, gamma_default=4)
    p.set_defaults(func=_cmd("cmd_synth"))

    p = sub.add_parser("generate", help="engine only: decode codec frames from an LM folder and prompt ids")
    p.add_argument("--model", required=True, help="LM folder (config.json + model.safetensors), e.g. a voice's target/")
    p.add_argument("--text-ids", type=A.ids_arg, required=True, help="prompt token ids (the LM's own), e.g. 3,4,5")
    p.add_argument("--frames-per-id", type=A.positive(int, "frames per id"), default=4,
                   help="an aligned target's frame track: every id spoken this many frames (voices time "
                        "their text with a duration predictor: use `voicespec say`)")
    p.add_argument("--drafter", default="ngram", help="none, ngram or draft-model (with --draft-model DIR)")
    p.add_argument("--draft-model", help="LM folder for --drafter draft-model")
    p.add_argument("--dump-tokens", help="write the frames and stats as JSON here")
    A.add_decoding_args(p, unset="the engine's defaults")
    p.set_defaults(func=_cmd("cmd_generate"))

    S = ServerConfig()  # the serve flags' defaults are the config's own
    p = sub.add_parser("serve", help=f"WebSocket streaming server (protocol {PROTOCOL_VERSION}), /metrics, /healthz and a "
                                     "browser player at /")
    p.add_argument("--host", default=S.host, help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=A.port_arg, default=S.port, help="0 picks a free port")
    p.add_argument("--openai-port", type=A.door_port_arg, default=OPENAI_PORT,
                   help=f"the OpenAI-compatible HTTP door (POST /v1/audio/speech) on this port (default {OPENAI_PORT}; "
                        "0 picks a free port; off: none)")
    p.add_argument("--wyoming-port", type=A.door_port_arg, default=None,
                   help=f"the Wyoming door (Home Assistant) on this port, usually {WYOMING_PORT} (default: off)")
    p.add_argument("--model", "--voice", dest="model", help="the default voice: a folder or an installed voice name (default: voicespec-tiny-g2)")
    p.add_argument("--voices", type=lambda v: tuple(x for x in v.split(",") if x),
                   help="comma-separated voices clients may name besides the default, loaded on first use "
                        "(default: every installed voice)")
    A.add_device_args(p)
    A.add_threads_arg(p)
    p.add_argument("--drafter", help="default drafter: none, ngram or a draft model of the voice (default: the voice's)")
    p.add_argument("--gamma", type=A.gamma_arg, default=S.gamma, help="default draft length, or 'auto'")
    p.add_argument("--seed", type=int, help="seed of requests that name none: the same text, the same audio "
                   "(default: fresh randomness for each)")
    p.add_argument("--max-sessions", type=A.positive(int, "max sessions"), default=S.max_sessions,
                   help="sessions served at once; more are refused")
    p.add_argument("--api-key", help="require this key (Authorization: Bearer KEY or ?api_key=KEY)")
    p.add_argument("--allowed-origin", action="append", default=[], help="browser origin allowed besides this server's own page; repeatable; '*' for any")
    p.add_argument("--max-text-chars", type=A.positive(int, "max text chars"), default=S.max_text_chars, help="text characters per context")
    p.add_argument("--max-message-bytes", type=A.positive(int, "max message bytes"), default=S.max_message_bytes, help="larger client messages close the socket (1009)")
    p.add_argument("--inactivity-timeout", type=A.positive(float, "inactivity timeout"), default=S.inactivity_timeout_s, help="seconds before an idle socket is closed")
    p.add_argument("--start-timeout", type=A.positive(float, "start timeout"), default=S.start_timeout_s, help="seconds a socket may wait before 'start'")
    p.add_argument("--max-messages-per-s", type=A.positive(float, "messages per second"), default=S.max_messages_per_s, help="per connection, sustained; bursts of twice that pass")
    p.add_argument("--max-text-chars-per-s", type=A.positive(float, "text characters per second"), default=S.max_text_chars_per_s, help="per connection, sustained")
    p.add_argument("--max-sessions-per-address", type=A.positive(int, "sessions per address"), help="sessions one client address may hold (default: no limit)")
    p.add_argument("--stalled-send-timeout", type=A.positive(float, "stalled send timeout"), default=S.stalled_send_timeout_s, help="close a connection whose sends have not progressed for this many seconds")
    p.add_argument("--max-gamma", type=A.positive(int, "max gamma"), default=S.max_gamma, help="longest fixed draft a session may ask for")
    p.add_argument("--frame-cache-mb", type=A.positive(float, "frame cache MB", allow_zero=True), default=S.frame_cache_mb,
                   help="replay repeated sentences from a cache of their decoded frames this big; 0: off")
    p.add_argument("--max-tick-contexts", type=A.positive(int, "max tick contexts"), default=S.max_tick_contexts,
                   help="contexts one decode tick steps, shared fairly between connections past it")
    p.add_argument("--max-tick-prefill", type=A.positive(int, "max tick prefill"), default=S.max_tick_prefill,
                   help="prompts one decode tick prefills while more contexts are ready than it steps; newcomers past it start on the next ticks")
    p.add_argument("--text-processes", type=A.positive(int, "text processes", allow_zero=True), default=S.text_processes,
                   help="worker processes that read the served text (phonemes, durations), so its pure-Python work "
                        "never holds the decode thread's interpreter lock; 0: threads of the server's process")
    p.add_argument("--max-spec-contexts", type=A.positive(int, "max speculative contexts", allow_zero=True), default=S.max_spec_contexts,
                   help="speculate while a decode tick steps at most this many contexts; past it every pass is plain (a draft "
                        "widens the batched pass all sessions wait for; the audio is the same); 0: never")
    p.add_argument("--max-decoding-contexts", type=A.positive(int, "max decoding contexts"), default=S.max_decoding_contexts,
                   help="contexts under way at once; a new one past it waits for a place (the longest wait first, less a "
                        "second for each context its connection has under way), so the streams already playing keep real "
                        "time; set it a little under the largest clean count of `voicespec bench --probe` on this machine "
                        "(newcomers must start beside the streams); default: no limit")
    p.add_argument("--max-waiting-contexts", type=A.positive(int, "max waiting contexts", allow_zero=True),
                   default=S.max_waiting_contexts,
                   help="with --max-decoding-contexts: refuse new sessions and requests (1013, HTTP 429) while this many "
                        "contexts wait for a place, so a load balancer sends them elsewhere (default: they all wait)")
    p.add_argument("--pacing-lead-ms", type=A.positive(float, "pacing lead", allow_zero=True), help="pace audio to real time plus this lead (default or 0: send as fast as made)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="serve as a Ray Serve application (replicas each holding the voice, one ingress on --ray-port): "
                        "a cluster's address, or none for a local Ray (needs the `cluster` extra)")
    p.add_argument("--ray-replicas", type=A.positive(int, "replicas"), default=2, help="replicas at start")
    p.add_argument("--ray-max-replicas", type=A.positive(int, "max replicas"), help="autoscale up to this many (default: --ray-replicas)")
    p.add_argument("--ray-sessions-per-replica", type=A.positive(int, "sessions per replica"), default=8,
                   help="the autoscaler's target of active sessions per replica")
    p.add_argument("--ray-port", type=A.port_arg, default=8000, help="the ingress's port (Serve's HTTP proxy)")
    p.add_argument("--ray-replica-gpus", type=A.positive(float, "replica GPUs", allow_zero=True), default=0.0,
                   help="GPUs per replica (Ray hides GPUs from actors that ask for none; 0.5 puts two on a GPU)")
    p.set_defaults(func=_cmd("cmd_serve"))

    p = sub.add_parser("stress", help="the server on loopback against hostile clients: fuzz flood, disconnect storm, CPU and contexts floods, soak; one table")
    A.add_voice_args(p)
    p.add_argument("--messages", type=A.positive(int, "messages"), default=100_000, help="generated hostile messages")
    p.add_argument("--sockets", type=A.positive(int, "sockets"), default=8, help="hostile sockets at a time")
    p.add_argument("--disconnects", type=A.positive(int, "disconnects"), default=1000, help="mid-stream drops")
    p.add_argument("--soak-s", type=A.positive(float, "soak seconds", allow_zero=True), default=0.0, help="soak of 4 sessions this long (0: none)")
    p.add_argument("--flood-s", type=A.positive(float, "flood seconds", allow_zero=True), default=20.0,
                   help="length of each flood within budgets: 4,300-digit texts from one socket, then --flood-sockets "
                        "sockets of 8 long contexts each (0: no floods)")
    p.add_argument("--flood-sockets", type=A.positive(int, "flood sockets"), default=12, help="sockets of the contexts flood")
    p.add_argument("--seed", type=int, default=0, help="seed of the generated messages")
    p.add_argument("--phases", type=A.names_arg(STRESS_PHASES, "phases"), default=",".join(STRESS_PHASES),
                   help=f"the phases to run, comma-separated: {', '.join(STRESS_PHASES)}")
    p.add_argument("--out", help="also write the report as JSON here")
    p.set_defaults(func=_cmd("cmd_stress"))

    about = "speak TEXT through a running server to an audio file; report TTFA, gaps, underruns"
    p = sub.add_parser("client", help=about, description=(
        f"{about}. Speaks protocol {PROTOCOL_VERSION} to `voicespec serve`; waits up to --wait-s for a server "
        "that is still starting."))
    A.add_client_args(p, DEFAULT_URL)
    p.set_defaults(func=_cmd("cmd_client"))

    p = sub.add_parser("train", help="training recipes: teacher data, codec, ASR, durations, codec LM, draft model")
    train = p.add_subparsers(dest="recipe", required=True, parser_class=Parser)
    for name, help, add, module, run in TRAIN_RECIPES:
        t = train.add_parser(name, help=help, description=help)
        getattr(T, add)(t)
        t.set_defaults(func=_run(module, run))

    p = sub.add_parser("evaluate", help="a voice's quality: the independent judge's WER/CER on teacher, codec and "
                                        "generated speech; MCD-DTW; exactness")
    E.add_evaluate_args(p)
    p.set_defaults(func=_run("voicespec.cli.evaluate", "run_evaluate"))

    p = sub.add_parser("bench", help="latency-budget evaluation: plain vs every drafter and γ, transformers peers, "
                                     "streaming, server load")
    B.add_bench_args(p)
    p.set_defaults(func=_run("voicespec.cli.bench", "run_bench"))

    p = sub.add_parser("tiny", help="write a tiny random-weight voice folder (codec, LM, draft model)")
    p.add_argument("--layout", choices=["flat", "delay", "aligned", "coarse", "grouped"], default="delay",
                   help="coarse: coarse-first with a fine stage, aligned, phonemes (as voicespec-tiny); grouped: the same, two "
                        "frames a step (as the default voice); aligned: a frame-aligned text track and a duration predictor")
    p.add_argument("--out", required=True, help="voice folder to write")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    p.set_defaults(func=_cmd("cmd_tiny"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser().parse_args(argv)
        from voicespec.cli.commands import quiet_libraries

        quiet_libraries()
        return args.func(args)
    except (CliError, ValueError, OSError, ImportError) as e:  # the user's to fix (a missing extra too): status 2
        print(f"voicespec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug: still one line, unless asked for the traceback
        if os.environ.get("VOICESPEC_DEBUG"):
            raise
        print(f"voicespec: error: internal error ({type(e).__name__}: {e}); set VOICESPEC_DEBUG=1 for the traceback",
              file=sys.stderr)
        return 1


def entry() -> None:
    """The ``voicespec`` command: :func:`main`, then exit without a last collection of the heap.

    Python's finalization runs the cyclic collector over every object left (torch's alone
    are 0.4 s of a 2.6 s ``say`` on a 2-core machine); frozen objects are skipped, while files,
    atexit handlers and module teardown still run. Not in :func:`main`: a process that goes on
    (a test) would never collect the frozen objects' cycles."""
    code = main()
    gc.freeze()
    sys.exit(code)
