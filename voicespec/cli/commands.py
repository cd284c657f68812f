"""What each light subcommand does. Heavy imports happen here, when a command runs."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

from voicespec.cli.args import CliError
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.options import SAMPLING_OPTIONS


def quiet_libraries() -> None:
    """Library chatter (weight-norm deprecation, weight-loading bars) is not for CLI users."""
    import warnings

    from transformers.utils import logging as hf_logging

    warnings.filterwarnings("ignore", message=".*weight_norm.*", category=FutureWarning)
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def decode_config(args: argparse.Namespace, defaults: SamplingConfig | None = None) -> DecodeConfig:
    """Sampling flags given on the command line override ``defaults`` (the voice's settings)."""
    given = {o.name: getattr(args, o.name) for o in SAMPLING_OPTIONS if getattr(args, o.name) is not None}
    sampling = replace(defaults or SamplingConfig(), **given)
    gamma = 0 if args.no_spec else args.gamma
    tree = None if args.no_spec else getattr(args, "tree", None)
    return DecodeConfig(sampling=sampling, gamma=gamma, max_steps=args.max_steps, seed=args.seed, tree=tree)


def synthesis_options(args: argparse.Namespace, voice):
    from voicespec.pipeline.synthesis import SynthesisOptions

    drafter = "none" if args.no_spec else args.drafter
    return SynthesisOptions(decode=decode_config(args, voice.sampling), drafter=drafter, sample_rate=args.sample_rate)


def cmd_say(args: argparse.Namespace) -> int:
    import torch

    from voicespec.audio import check_audio_path, write_audio_atomic
    from voicespec.pipeline.synthesis import Synthesizer
    from voicespec.pipeline.voice import load_voice

    check_audio_path(args.output)
    voice = load_voice(args.model, args.device, args.dtype)
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
    from voicespec.pipeline.voice import load_voice

    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such input file")
    voices: dict[str | None, Synthesizer] = {}

    def synthesizer_for(name: str | None) -> Synthesizer:
        key = name or args.model
        if key not in voices:
            voices[key] = Synthesizer(load_voice(key, args.device, args.dtype))
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
    from voicespec.engine.decoder import SpecDecoder
    from voicespec.lm.loading import load_step_lm
    from voicespec.pipeline.drafters import build_drafter

    if not args.no_spec and args.drafter == "draft-model" and not args.draft_model:
        raise CliError("drafter 'draft-model' needs --draft-model DIR (a model folder)")
    config = decode_config(args)
    target = load_step_lm(args.model)
    drafter = None if args.no_spec else build_drafter(args.drafter, {"draft-model": args.draft_model} if args.draft_model else {},
                                                      target=target)
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

    from voicespec.serve.protocol import WS_PATH
    from voicespec.serve.config import ServerConfig
    from voicespec.serve.server import run_server

    config = ServerConfig(
        host=args.host, port=args.port, voice=args.model, drafter=args.drafter, gamma=args.gamma,
        max_sessions=args.max_sessions, api_key=args.api_key, allowed_origins=tuple(args.allowed_origin),
        max_text_chars=args.max_text_chars, max_message_bytes=args.max_message_bytes,
        inactivity_timeout_s=args.inactivity_timeout, start_timeout_s=args.start_timeout,
        max_messages_per_s=args.max_messages_per_s, max_text_chars_per_s=args.max_text_chars_per_s,
        max_sessions_per_address=args.max_sessions_per_address, stalled_send_timeout_s=args.stalled_send_timeout,
        max_gamma=args.max_gamma, frame_cache_mb=args.frame_cache_mb, device=args.device, dtype=args.dtype, pacing_lead_s=args.pacing_lead_ms / 1000 if args.pacing_lead_ms else None,
    )

    def ready(server) -> None:
        url = f"{config.host}:{server.port}"
        print(f"serving voice {server.voice.name!r}: player http://{url}/  WebSocket ws://{url}{WS_PATH}  "
              f"metrics http://{url}/metrics", flush=True)

    asyncio.run(run_server(config, ready))
    return 0


def cmd_client(args: argparse.Namespace) -> int:
    import asyncio

    from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

    from voicespec.serve.client import ServerError, run_client, summary_line

    try:
        result = asyncio.run(run_client(args))
    except ServerError as e:
        raise CliError(f"server: {e}") from None
    except InvalidStatus as e:
        raise CliError(f"server refused the connection: HTTP {e.response.status_code} {e.response.body.decode(errors='replace')}") from None
    except InvalidURI as e:
        raise CliError(f"bad server URL: {e}") from None
    except (InvalidHandshake, TimeoutError, ConnectionError) as e:
        raise CliError(f"could not open a WebSocket to {args.url}: {e}") from None
    print(summary_line(result, args.prebuffer_ms))
    return 0


def cmd_stress(args: argparse.Namespace) -> int:
    from voicespec.bench.stress import StressConfig, run_stress
    from voicespec.pipeline.voice import load_voice

    voice = load_voice(args.model, args.device, args.dtype)
    report = run_stress(voice, StressConfig(messages=args.messages, sockets=args.sockets, disconnects=args.disconnects,
                                            soak_s=args.soak_s, seed=args.seed))
    print(report.table())
    if args.out:
        Path(args.out).write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    bad = any(p["tracebacks"] or p["bad_closes"] or p["max_lsb"] > 1 or p["rows_left"] or p["contexts_left"]
              for p in report.phases)
    return 1 if bad else 0
