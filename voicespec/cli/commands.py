"""What each light subcommand does. Heavy imports happen here, when a command runs."""

from __future__ import annotations

import argparse
import errno
import importlib.util
import json
import os
import socket
import sys
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from voicespec.cli.args import CliError
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.options import SAMPLING_OPTIONS

if TYPE_CHECKING:
    import numpy as np
    import torch


def quiet_libraries() -> None:
    """Library chatter (weight-norm deprecation, weight-loading bars) is not for CLI users. The
    environment says it to ``transformers`` and ``huggingface_hub`` should a command import them
    (speaking with our own voices does not)."""
    import os
    import warnings

    warnings.filterwarnings("ignore", message=".*weight_norm.*", category=FutureWarning)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")


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
    return SynthesisOptions(decode=decode_config(args, voice.sampling), drafter=drafter, sample_rate=args.sample_rate,
                            speed=getattr(args, "speed", 1.0))


def read_text(text: str | None, command: str = "say") -> str:
    """``say``'s (and ``client``'s) TEXT: as given, or read from stdin for ``-`` (or none, when
    stdin is not a terminal)."""
    if text == "-" or (text is None and sys.stdin is not None and not sys.stdin.isatty()):
        return stdin_text()
    if text is None:
        raise CliError(f"{command} needs TEXT (or '-' to read it from stdin)")
    return argument_text(text)


def utf8_text(data: bytes, what: str) -> str:
    """``data`` decoded as UTF-8, or a one-line error naming the first byte that is not: Python
    would otherwise carry it on as a surrogate escape, to fail deep in the front end."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CliError(f"{what} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None


def stdin_text() -> str:
    """All of stdin as UTF-8 text, whatever the locale says stdin's encoding is (a text stream a
    caller put in its place is read as is)."""
    raw = getattr(sys.stdin, "buffer", None)
    return sys.stdin.read() if raw is None else utf8_text(raw.read(), "standard input")


def argument_text(text: str) -> str:
    """TEXT from the command line: bytes that were not UTF-8 reach ``argv`` as surrogate escapes
    (PEP 383); they are reported as bytes, like stdin's."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return utf8_text(text.encode("utf-8", "surrogateescape"), "TEXT")
        except UnicodeEncodeError:  # a lone surrogate of its own, not an escaped byte: sanitize names it
            return text
    return text


def audio_output(output: str, fmt: str | None, command: str = "say") -> tuple[Path | None, str]:
    """Where ``say`` (or ``client``) writes (None: stdout) and in what format (an extension such
    as ``.wav``), checked before any work. ``--format`` overrides the extension, but may not
    contradict a known one; a missing folder is an error, not made silently (a typo would scatter
    files)."""
    from voicespec.audio import FILE_FORMATS, check_audio_path

    if output == "-":
        check_not_terminal("-o FILE")
        return None, "." + (fmt or "wav")
    path = Path(output)
    ext = path.suffix.lower()
    if fmt is None:
        check_audio_path(path)
    elif ext in FILE_FORMATS and ext != "." + fmt:
        raise CliError(f"{output}: the extension says {ext[1:]} but --format says {fmt}; make them agree or drop one")
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "no such folder"
        raise CliError(f"{folder}: {what} ({command} writes into an existing folder; create it first)")
    return path, ext if fmt is None else "." + fmt


def check_not_terminal(instead: str) -> None:
    """Audio is not for a terminal: refuse before any work."""
    if sys.stdout.isatty():
        raise CliError(f"refusing to write audio to a terminal: redirect stdout (> out.wav, | aplay) or give {instead}")


def audio_to_stdout(pcm: torch.Tensor | np.ndarray, sample_rate: int, suffix: str) -> None:
    """A whole audio file on stdout: its header needs its length, so it is written at the end."""
    from voicespec.audio import encode_audio

    sys.stdout.buffer.write(encode_audio(pcm, sample_rate, suffix))
    sys.stdout.buffer.flush()


def write_raw_stream(chunks: Iterable[torch.Tensor], sample_rate: int) -> None:
    """``--output-raw``: s16le mono PCM on stdout, each chunk flushed as it is made (Piper's
    ``--output-raw``, for ``| aplay``); a reader that goes away ends it quietly."""
    from voicespec.audio import to_encoding

    print(f"raw audio on stdout: s16le, mono, {sample_rate} Hz", file=sys.stderr, flush=True)
    out = sys.stdout.buffer
    try:
        for pcm in chunks:
            out.write(to_encoding(pcm, "pcm_s16le"))
            out.flush()
    except BrokenPipeError:  # `| head -c N`: stop, and keep Python's exit flush from failing again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def cmd_say(args: argparse.Namespace) -> int:
    import torch

    from voicespec.api import LongTextStream
    from voicespec.audio import write_audio_chunks
    from voicespec.frontend.lexicon import read_lexicon
    from voicespec.frontend.ssml import is_ssml
    from voicespec.pipeline.synthesis import SynthesisStream
    from voicespec.pipeline.voice import load_voice
    from voicespec.threads import use_threads

    use_threads(args.threads)

    if args.output_raw:
        if args.format:
            raise CliError("--format does not apply to --output-raw (always raw s16le PCM)")
        check_not_terminal("-o FILE")
        path, suffix = None, None
    else:
        path, suffix = audio_output(args.output, args.format)
    text = read_text(args.text)
    voice = load_voice(args.model, args.device, args.dtype)
    options = synthesis_options(args, voice)
    if args.ssml or args.lexicon or is_ssml(text):
        lexicon = read_lexicon(args.lexicon) if args.lexicon else None
        stream = SynthesisStream(voice, text, options, voice.script(text, ssml=args.ssml or None, lexicon=lexicon))
    else:
        stream = LongTextStream(voice, text, options)
    rate = stream.stats.sample_rate
    chunks = (chunk.pcm for chunk in stream)
    if args.output_raw:
        write_raw_stream(chunks, rate)
    elif path is not None:
        write_audio_chunks(path, chunks, rate, suffix)
    else:
        audio_to_stdout(torch.cat([*chunks, torch.zeros(0)]), rate, suffix)
    if args.dump_tokens:
        frames = [f.tolist() for f in stream.frames]
        Path(args.dump_tokens).write_text(json.dumps({"sentences": [s for s, _ in stream.sentences], "frames": frames}))
    print(stream.stats.summary(), file=sys.stdout if path is not None else sys.stderr)  # never into the audio
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from voicespec.batch import SUMMARY, BatchConfig, failure_lines, read_items, run_batch, synthesizers
    from voicespec.threads import use_threads

    use_threads(args.threads)
    src = Path(args.input)
    if not src.is_file():
        raise FileNotFoundError(f"{src}: no such input file")
    synthesizer_for = synthesizers(args.model, args.device, args.dtype)
    default = synthesizer_for(None)  # the default voice must load, or nothing can be done
    out = Path(args.output)
    config = BatchConfig(out, synthesis_options(args, default.voice), args.format, args.resume,
                         progress_bar=sys.stderr.isatty())
    if args.ray is not None:
        from voicespec.cluster.synth import RayConfig, run_batch_ray

        ray = RayConfig(None if args.ray == "local" else args.ray, args.ray_workers, args.model, args.device, args.dtype, args.threads)
        summary = run_batch_ray(read_items(src), config, ray)
    else:
        summary = run_batch(read_items(src), config, synthesizer_for)
    for line in failure_lines(summary, out / SUMMARY):  # on stderr, like every error
        print(line, file=sys.stderr)
    print(
        f"{summary['ok']} written, {summary['skipped']} skipped, {summary['failed']} failed; "
        f"audio {summary['audio_s']:.1f}s in {summary['wall_s']:.1f}s; summary: {out / SUMMARY}"
    )
    return 1 if summary["failed"] else 0


def generate_prompt(target, ids: list[int], frames_per_id: int):
    """The prompt for raw LM ids. A target conditioned on a frame-aligned text track gets one that
    speaks every id ``frames_per_id`` frames: a voice times its text with its duration predictor,
    which ``generate`` (the engine alone) does not have."""
    config = getattr(getattr(target, "model", None), "config", None)
    positions = getattr(config, "track_positions", 0)
    if not positions:
        return target.layout.prompt(ids)
    from voicespec.frontend.duration import frame_track

    return target.layout.prompt(ids, track=frame_track(ids, [frames_per_id] * len(ids), positions))


def cmd_generate(args: argparse.Namespace) -> int:
    from voicespec.engine.decoder import SpecDecoder
    from voicespec.lm.loading import load_step_lm
    from voicespec.pipeline.drafters import build_drafter
    from voicespec.pipeline.voice import VOICE_FILE

    if not args.no_spec and args.drafter == "draft-model" and not args.draft_model:
        raise CliError("drafter 'draft-model' needs --draft-model DIR (a model folder)")
    if (Path(args.model) / VOICE_FILE).is_file():
        raise CliError(f"{args.model} is a voice folder; generate runs the engine alone on an LM folder: pass "
                       f"--model {Path(args.model) / 'target'} (or speak text with `voicespec say --model {args.model}`)")
    config = decode_config(args)
    target = load_step_lm(args.model)
    drafter = None if args.no_spec else build_drafter(args.drafter, {"draft-model": args.draft_model} if args.draft_model else {},
                                                      target=target)
    gen = SpecDecoder(target, drafter, config).generate(generate_prompt(target, args.text_ids, args.frames_per_id))
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
        host=args.host, port=args.port, voice=args.model, voices=args.voices, drafter=args.drafter, gamma=args.gamma,
        max_sessions=args.max_sessions, api_key=args.api_key, allowed_origins=tuple(args.allowed_origin),
        max_text_chars=args.max_text_chars, max_message_bytes=args.max_message_bytes,
        inactivity_timeout_s=args.inactivity_timeout, start_timeout_s=args.start_timeout,
        max_messages_per_s=args.max_messages_per_s, max_text_chars_per_s=args.max_text_chars_per_s,
        max_sessions_per_address=args.max_sessions_per_address, stalled_send_timeout_s=args.stalled_send_timeout,
        max_gamma=args.max_gamma, frame_cache_mb=args.frame_cache_mb, max_tick_contexts=args.max_tick_contexts, max_tick_prefill=args.max_tick_prefill, max_spec_contexts=args.max_spec_contexts, max_decoding_contexts=args.max_decoding_contexts, max_waiting_contexts=args.max_waiting_contexts, text_processes=args.text_processes, device=args.device, dtype=args.dtype, threads=args.threads, pacing_lead_s=args.pacing_lead_ms / 1000 if args.pacing_lead_ms else None,
        openai_port=args.openai_port, wyoming_port=args.wyoming_port, seed=args.seed,
    )
    if config.openai_port is not None and importlib.util.find_spec("aiohttp") is None:
        raise CliError("the OpenAI door needs aiohttp: pip install 'voicespec[serve]' (or --openai-port off)")
    if config.wyoming_port is not None and importlib.util.find_spec("wyoming") is None:
        raise CliError("the Wyoming door needs the wyoming package: pip install 'voicespec[serve]'")

    if args.ray is not None:
        from voicespec.cluster.serve import RayServeConfig, run

        top = max(args.ray_replicas, args.ray_max_replicas or args.ray_replicas)
        run(config, RayServeConfig(replicas=args.ray_replicas, min_replicas=1 if args.ray_max_replicas else args.ray_replicas, max_replicas=top,
                                   sessions_per_replica=args.ray_sessions_per_replica, port=args.ray_port,
                                   replica_gpus=args.ray_replica_gpus),
            None if args.ray == "local" else args.ray)
        return 0

    def ready(server) -> None:
        url = f"{config.host}:{server.port}"
        door = "" if server.openai_port is None else f"  OpenAI http://{config.host}:{server.openai_port}/v1"
        door += "" if server.wyoming_port is None else f"  Wyoming tcp://{config.host}:{server.wyoming_port}"
        print(f"serving voice {server.voice.name!r}: player http://{url}/  WebSocket ws://{url}{WS_PATH}  "
              f"metrics http://{url}/metrics{door}", flush=True)

    asyncio.run(run_server(config, ready))
    return 0


def cmd_client(args: argparse.Namespace) -> int:
    import asyncio

    from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI

    from voicespec.audio import write_audio_atomic
    from voicespec.serve.client import ServerError, run_client, summary_line

    path, suffix = audio_output(args.output, None, "client")  # as say does: before any work
    text = read_text(args.text, "client")
    try:
        result = asyncio.run(run_client(args, text))
    except ServerError as e:
        raise CliError(f"server: {e}") from None
    except InvalidStatus as e:
        raise CliError(f"server refused the connection: HTTP {e.response.status_code} {e.response.body.decode(errors='replace')}") from None
    except InvalidURI as e:
        raise CliError(f"bad server URL: {e}") from None
    except OSError as e:
        if is_connect_error(e):
            raise CliError(connect_hint(args.url, e)) from None
        if isinstance(e, ConnectionError):
            raise CliError(f"lost the connection to {args.url}: {e}") from None
        raise  # not the connection: the output file, say
    except InvalidHandshake as e:
        raise CliError(f"could not open a WebSocket to {args.url}: {e}") from None
    if path is None:
        audio_to_stdout(result["pcm"], result["sample_rate"], suffix)
    else:
        write_audio_atomic(path, result["pcm"], result["sample_rate"])
    print(summary_line(result, args.prebuffer_ms), file=sys.stdout if path is not None else sys.stderr)
    return 0


# errno values of a connection that did not get through (the rest of OSError: files, disks)
CONNECT_ERRNOS = {errno.ECONNREFUSED, errno.ENETUNREACH, errno.EHOSTUNREACH, errno.EHOSTDOWN, errno.ETIMEDOUT,
                  errno.EADDRNOTAVAIL}


def is_connect_error(e: OSError) -> bool:
    """Whether opening the connection failed, not writing the output. asyncio reports several
    addresses that all failed (``localhost``: ::1 and 127.0.0.1) as one errno-less OSError."""
    return (isinstance(e, (TimeoutError, ConnectionRefusedError, socket.gaierror)) or e.errno in CONNECT_ERRNOS
            or str(e).startswith("Multiple exceptions:"))


def connect_hint(url: str, e: OSError) -> str:
    """Why a client could not connect, and what to do about it."""
    if isinstance(e, socket.gaierror):
        return f"could not connect to {url} (unknown host: {e.strerror or e}): check the host in --url"
    if isinstance(e, ConnectionRefusedError) or e.errno == errno.ECONNREFUSED or "Connect call failed" in str(e):
        reason = "connection refused"
    elif isinstance(e, TimeoutError) or e.errno == errno.ETIMEDOUT:
        reason = "timed out"
    else:
        reason = e.strerror or str(e)
    return (f"could not connect to {url} ({reason}): is `voicespec serve` running there? "
            "Start one with `voicespec serve`, or pass --url")


def cmd_stress(args: argparse.Namespace) -> int:
    from voicespec.bench.stress import StressConfig, run_stress
    from voicespec.pipeline.voice import load_voice

    voice = load_voice(args.model, args.device, args.dtype)
    report = run_stress(voice, StressConfig(messages=args.messages, sockets=args.sockets, disconnects=args.disconnects,
                                            soak_s=args.soak_s, flood_s=args.flood_s, flood_sockets=args.flood_sockets,
                                            seed=args.seed, phases=tuple(args.phases)))
    print(report.table())
    if args.out:
        Path(args.out).write_text(json.dumps(report.to_dict(), indent=1) + "\n")
    bad = any(p["tracebacks"] or p["bad_closes"] or not p["identical"] or p["rows_left"] or p["contexts_left"]
              for p in report.phases)
    return 1 if bad else 0
