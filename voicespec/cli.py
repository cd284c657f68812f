"""The ``voicespec`` command line. Bad arguments give one ``voicespec: error: ...`` line, exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch

from voicespec.engine.decoder import DecodeConfig, SpecDecoder
from voicespec.engine.drafters import DRAFTERS, make_drafter
from voicespec.engine.sampling import SamplingConfig
from voicespec.pipeline.synthesis import SynthesisOptions


class CliError(Exception):
    """A user error: reported as one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line instead of usage + traceback
        raise CliError(message)


def gamma_arg(value: str) -> int | str:
    if value == "auto":
        return value
    try:
        g = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"gamma must be an integer >= 0 or 'auto', got {value!r}") from None
    if g < 0:
        raise argparse.ArgumentTypeError(f"gamma must be >= 0, got {g}")
    return g


def ids_arg(value: str) -> list[int]:
    try:
        return [int(x) for x in value.replace(",", " ").split()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integer ids, got {value!r}") from None


def add_decoding_args(p: argparse.ArgumentParser, gamma_default: int | str = "auto") -> None:
    p.add_argument("--gamma", type=gamma_arg, default=gamma_default, help=f"draft length per step, or 'auto' (default {gamma_default})")
    p.add_argument("--no-spec", action="store_true", help="plain decoding (same as --gamma 0)")
    p.add_argument("--temperature", type=float, help="0 means greedy (default: the voice's, else 1)")
    p.add_argument("--top-k", type=int, help="0 disables (default: the voice's)")
    p.add_argument("--top-p", type=float, help="default: the voice's, else 1 (off)")
    p.add_argument("--repetition-penalty", type=float, help="default: the voice's, else 1 (off)")
    p.add_argument("--repetition-window", type=int, help="steps the penalty looks back")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=2000)


def add_voice_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "--voice", dest="model", help="voice folder or name under models/ (default: the default voice)")
    p.add_argument("--drafter", help="none, ngram or a draft model shipped with the voice (default: the voice's)")
    p.add_argument("--sample-rate", type=int, help="output rate: 8000, 16000, 22050, 24000 or 48000 (default: the codec's)")


SAMPLING_ARGS = ("temperature", "top_k", "top_p", "repetition_penalty", "repetition_window")


def decode_config(args: argparse.Namespace, defaults: SamplingConfig | None = None) -> DecodeConfig:
    """Sampling flags given on the command line override ``defaults`` (the voice's settings)."""
    given = {k: getattr(args, k) for k in SAMPLING_ARGS if getattr(args, k) is not None}
    sampling = replace(defaults or SamplingConfig(), **given)
    gamma = 0 if args.no_spec else args.gamma
    return DecodeConfig(sampling=sampling, gamma=gamma, max_steps=args.max_steps, seed=args.seed)




def load_voice(spec: str | None):
    from voicespec.pipeline.voice import load_voice

    return load_voice(spec)


def synthesis_options(args: argparse.Namespace, voice) -> SynthesisOptions:
    drafter = "none" if args.no_spec else args.drafter
    return SynthesisOptions(decode=decode_config(args, voice.sampling), drafter=drafter, sample_rate=args.sample_rate)


def cmd_say(args: argparse.Namespace) -> int:
    from voicespec.audio import check_audio_path, write_audio_atomic
    from voicespec.pipeline.synthesis import Synthesizer

    check_audio_path(args.output)
    voice = load_voice(args.model)
    stream = Synthesizer(voice).stream(args.text, synthesis_options(args, voice))
    chunks = [chunk.pcm for chunk in stream]
    pcm = torch.cat(chunks) if chunks else torch.zeros(0)
    write_audio_atomic(args.output, pcm, stream.stats.sample_rate)
    if args.dump_tokens:
        frames = [f.tolist() for f in stream.frames]
        Path(args.dump_tokens).write_text(json.dumps({"sentences": [s for s, _ in stream.sentences], "frames": frames}))
    print(stream.stats.summary())
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from voicespec.batch import BatchConfig, read_items, run_batch
    from voicespec.pipeline.synthesis import Synthesizer

    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such input file")
    voices: dict[str | None, Synthesizer] = {}

    def synthesizer_for(name: str | None) -> Synthesizer:
        key = name or args.model
        if key not in voices:
            voices[key] = Synthesizer(load_voice(key))
        return voices[key]

    default = synthesizer_for(None)  # the default voice must load, or nothing can be done
    config = BatchConfig(Path(args.output), synthesis_options(args, default.voice), args.format, args.resume)
    summary = run_batch(read_items(src), config, synthesizer_for)
    print(
        f"{summary['ok']} written, {summary['skipped']} skipped, {summary['failed']} failed; "
        f"audio {summary['audio_s']:.1f}s in {summary['wall_s']:.1f}s; summary: {Path(args.output) / 'summary.json'}"
    )
    return 1 if summary["failed"] else 0


def cmd_generate(args: argparse.Namespace) -> int:
    from voicespec.lm.loading import load_step_lm

    config = decode_config(args)
    target = load_step_lm(args.model)
    drafter = None if args.no_spec else make_drafter(args.drafter, args.draft_model)
    gen = SpecDecoder(target, drafter, config).generate(target.layout.prompt(args.text_ids))
    frames = gen.run()
    s = gen.stats
    if args.dump_tokens:
        Path(args.dump_tokens).write_text(json.dumps({"frames": frames.tolist(), "stats": s.to_dict()}))
    print(
        f"frames {frames.shape[1]}  steps {s.generated_steps}  target passes {s.target_passes}  "
        f"wall {s.total_s:.3f}s  acceptance {s.acceptance_rate:.2f}  "
        f"mean accepted length {s.mean_accepted_length:.2f}  finish {s.finish_reason}"
    )
    return 0


def cmd_tiny(args: argparse.Namespace) -> int:
    """Write a tiny random-weight voice (codec + target + draft model) for trying every command."""
    from voicespec.pipeline.tiny import build_tiny_voice

    out = build_tiny_voice(args.out, args.layout, args.seed)
    print(f"wrote voice folder {out} ({args.layout} layout, random weights: it babbles)")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from voicespec.bench.demo import run_demo

    return run_demo(quick=args.quick, wav_out=args.wav)


def cmd_serve(args: argparse.Namespace) -> int:
    import asyncio

    from voicespec.serve.server import WS_PATH, ServerConfig, run_server

    config = ServerConfig(
        host=args.host, port=args.port, voice=args.model, drafter=args.drafter, gamma=args.gamma,
        max_sessions=args.max_sessions, api_key=args.api_key, allowed_origins=tuple(args.allowed_origin),
        max_text_chars=args.max_text_chars, max_message_bytes=args.max_message_bytes,
        inactivity_timeout_s=args.inactivity_timeout, pacing_lead_s=args.pacing_lead_ms / 1000 if args.pacing_lead_ms else None,
    )

    def ready(server) -> None:
        url = f"{config.host}:{server.port}"
        print(f"serving voice {server.voice.name!r}: player http://{url}/  WebSocket ws://{url}{WS_PATH}  "
              f"metrics http://{url}/metrics", flush=True)

    asyncio.run(run_server(config, ready))
    return 0


def cmd_client(args: argparse.Namespace) -> int:
    import asyncio

    from websockets.exceptions import InvalidStatus

    from voicespec.serve.client import ServerError, run_client, summary_line

    try:
        result = asyncio.run(run_client(args))
    except ServerError as e:
        raise CliError(f"server: {e}") from None
    except InvalidStatus as e:
        raise CliError(f"server refused the connection: HTTP {e.response.status_code} {e.response.body.decode(errors='replace')}") from None
    print(summary_line(result, args.prebuffer_ms))
    return 0


def _lazy_args(p: argparse.ArgumentParser, module: str, add: str, run: str) -> None:
    """Arguments and handler from a training module, imported only when that parser is built."""
    import importlib

    mod = importlib.import_module(module)
    getattr(mod, add)(p)
    p.set_defaults(func=getattr(mod, run))


def build_parser() -> Parser:
    parser = Parser(prog="voicespec", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("demo", help="plain vs speculative decoding on tiny built-in models, checked token for token")
    p.add_argument("--quick", action="store_true", help="fewer prompts")
    p.add_argument("--wav", default="out/demo.wav", help="where the pipeline demo writes its audio")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("say", help="synthesize one text to a WAV/FLAC file")
    p.add_argument("text")
    p.add_argument("-o", "--output", required=True, help="output .wav or .flac")
    add_voice_args(p)
    p.add_argument("--dump-tokens", help="write the generated code frames as JSON here")
    add_decoding_args(p)
    p.set_defaults(func=cmd_say)

    p = sub.add_parser("synth", help="batch: a text file (one utterance per line) or JSONL to audio files")
    p.add_argument("input", help="text file, or .jsonl with id, text[, voice, seed, temperature, top_k, ...]")
    p.add_argument("-o", "--output", required=True, help="output folder")
    p.add_argument("--format", choices=["wav", "flac"], default="wav")
    p.add_argument("--resume", action="store_true", help="skip ids whose output file already exists")
    add_voice_args(p)
    add_decoding_args(p, gamma_default=4)
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser("generate", help="engine only: decode codec frames from an LM folder and prompt ids")
    p.add_argument("--model", required=True, help="LM folder (config.json + model.safetensors)")
    p.add_argument("--text-ids", type=ids_arg, required=True, help="prompt token ids, e.g. 3,4,5")
    p.add_argument("--drafter", default="ngram", help=f"one of: {', '.join(DRAFTERS)} (default ngram)")
    p.add_argument("--draft-model", help="LM folder for --drafter draft-model")
    p.add_argument("--dump-tokens", help="write the frames and stats as JSON here")
    add_decoding_args(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("serve", help="WebSocket streaming server (protocol v1), /metrics, /healthz and a browser player at /")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8765)
    p.add_argument("--model", "--voice", dest="model", help="voice folder or name under models/ (default: the default voice)")
    p.add_argument("--drafter", help="default drafter: none, ngram or a draft model of the voice (default: the voice's)")
    p.add_argument("--gamma", type=gamma_arg, default="auto", help="default draft length, or 'auto' (default auto)")
    p.add_argument("--max-sessions", type=int, default=16)
    p.add_argument("--api-key", help="require this key (Authorization: Bearer KEY or ?api_key=KEY)")
    p.add_argument("--allowed-origin", action="append", default=[], help="browser origin allowed besides this server's own page; repeatable; '*' for any")
    p.add_argument("--max-text-chars", type=int, default=5000, help="per context")
    p.add_argument("--max-message-bytes", type=int, default=65536, help="larger client messages close the socket (1009)")
    p.add_argument("--inactivity-timeout", type=float, default=60.0, help="seconds before an idle socket is closed")
    p.add_argument("--pacing-lead-ms", type=float, help="pace audio to real time plus this lead (default: send as fast as made)")
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("client", help="speak TEXT through a running server to a WAV/FLAC file; report TTFA, gaps, underruns")
    from voicespec.serve.client import add_client_args

    add_client_args(p)
    p.set_defaults(func=cmd_client)

    p = sub.add_parser("train", help="training recipes: teacher data, codec, ASR, durations, codec LM, draft model")
    train = p.add_subparsers(dest="recipe", required=True, parser_class=Parser)
    t = train.add_parser("data", help="regenerate the teacher corpus (needs the `train` extra: piper-tts)")
    _lazy_args(t, "voicespec.train.data", "add_data_args", "run_data")
    t = train.add_parser("codec", help="train (or resume) the codec on a teacher corpus")
    _lazy_args(t, "voicespec.train.codec", "add_codec_args", "run_codec")
    t = train.add_parser("asr", help="train (or resume) the CTC character recognizer (alignment, CER) on a teacher corpus")
    _lazy_args(t, "voicespec.train.asr", "add_asr_args", "run_asr")
    t = train.add_parser("duration", help="train the duration predictor on aligned (ids, frames) items from `train lm`")
    _lazy_args(t, "voicespec.frontend.duration", "add_duration_args", "run_duration")
    t = train.add_parser("lm", help="prepare (encode + align) the corpus and train (or resume) the codec LM target")
    _lazy_args(t, "voicespec.train.lm", "add_lm_args", "run_lm")
    t = train.add_parser("draft", help="distil a draft model from the target's first layers")
    _lazy_args(t, "voicespec.train.lm", "add_draft_args", "run_draft")
    t = train.add_parser("ship-codec", help="copy an exported codec into a voice folder with its model card and samples")
    _lazy_args(t, "voicespec.train.card", "add_ship_codec_args", "run_ship_codec")
    t = train.add_parser("ship", help="assemble a voice folder from finished runs, with model cards")
    _lazy_args(t, "voicespec.train.ship", "add_ship_args", "run_ship")

    p = sub.add_parser("evaluate", help="a voice's quality: CER of teacher/codec/generated speech, MCD-DTW, exactness")
    _lazy_args(p, "voicespec.eval.voice_eval", "add_evaluate_args", "run_evaluate")

    p = sub.add_parser("bench", help="latency-budget evaluation: plain vs every drafter and γ, transformers peers, streaming, server load")
    _lazy_args(p, "voicespec.bench.cli", "add_bench_args", "run_bench")

    p = sub.add_parser("tiny", help="write a tiny random-weight voice folder (codec, LM, draft model)")
    p.add_argument("--layout", choices=["flat", "delay", "aligned", "coarse"], default="delay",
                   help="coarse: coarse-first with a fine stage, aligned, phonemes (as the default voice); default delay")
    p.add_argument("--out", required=True, help="voice folder to write")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_tiny)
    return parser


def quiet_libraries() -> None:
    """Library chatter (weight-norm deprecation, weight-loading bars) is not for CLI users."""
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", message=".*weight_norm.*", category=FutureWarning)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def main(argv: Sequence[str] | None = None) -> int:
    quiet_libraries()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (CliError, ValueError, FileNotFoundError, OSError) as e:
        print(f"voicespec: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
