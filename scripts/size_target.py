"""Size a target by measurement before training it: random-weight targets of several shapes spoken
through the whole pipeline of the shipped voice (its front end, duration predictor and codec), plain
decoding with the voice's sampling, so each costs what a trained one of its shape would.

A random target babbles, but the duration predictor's track fixes every sentence's length, so
each shape makes the same frames. The shapes run interleaved, round after round; the figure is
the median RTF per shape. Pause anything else that runs (a training run) first.

    python scripts/size_target.py --shapes 1x4x256 2x4x256 2x6x256 2x6x320 --runs 5 --threads 1

A shape is ``GxLxD`` or ``GxLxDxW``: frames per step, layers, width (intermediate 3D), and the fine
stage's width (default D). ``--voices A B`` times trained voice folders the same way, interleaved
with the shapes (none by default). ``--sessions 1 16`` also runs each one's batched engine (the
decode worker, no sockets: ``voicespec.bench.batching.run_level``) at those session counts,
interleaved too: ms per tick and audio made per wall second, all sessions together.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
from dataclasses import replace

import torch

from voicespec.bench.batching import BatchLevel, run_level
from voicespec.engine.config import DecodeConfig
from voicespec.lm.codec_lm import CodecLM, CodecStepLM
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer
from voicespec.pipeline.voice import Voice

TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the green hills "
        "before the sun goes down.")


def shaped_voice(voice: Voice, shape: str, seed: int = 0) -> Voice:
    """``voice`` with a random-weight target of ``shape`` (``GxLxD`` or ``GxLxDxW``) and no drafters."""
    G, L, D, *W = (int(x) for x in shape.split("x"))
    config = replace(voice.target.model.config, frames_per_step=G, num_hidden_layers=L, hidden_size=D,
                     intermediate_size=3 * D, fine_width=W[0] if W else D, fine_reads_prev=False, voicespec_info={})
    torch.manual_seed(seed)
    target = CodecStepLM(CodecLM(config).eval())
    return Voice(voice.config, voice.codec, target, {}, voice.duration)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--voice", default="voicespec-tiny")
    p.add_argument("--shapes", nargs="*", default=["1x4x256", "2x4x256", "2x6x256"])
    p.add_argument("--voices", nargs="*", default=[], help="trained voice folders (or names) to time as they are")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--text", default=TEXT)
    p.add_argument("--sessions", nargs="*", type=int, default=[], help="batched-engine session counts (none by default)")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    base = Voice.from_pretrained(args.voice, device="cpu")
    synths = {s: Synthesizer(shaped_voice(base, s)) for s in args.shapes}
    synths.update({v: Synthesizer(Voice.from_pretrained(v, device="cpu")) for v in args.voices})
    options = SynthesisOptions(DecodeConfig(base.sampling), drafter="none")
    rtf: dict[str, list[float]] = {s: [] for s in synths}
    params = {s: synth.voice.target.model.n_params() for s, synth in synths.items()}
    for synth in synths.values():  # warm-up
        synth.synthesize(args.text, options)
    levels: dict[tuple[str, int], list[BatchLevel]] = {(s, n): [] for s in synths for n in args.sessions}
    texts = [t.strip() + "." for t in args.text.split(",")]
    for _ in range(args.runs):
        for s, synth in synths.items():
            _, stats = synth.synthesize(args.text, options)
            rtf[s].append(stats.rtf)
            for n in args.sessions:
                levels[s, n].append(run_level(synth.voice, texts, n, base.sampling, 2000, seed=0))
    print(json.dumps({"machine": platform.processor() or platform.machine(), "threads": args.threads, "runs": args.runs,
                      "audio_s": round(stats.audio_s, 2),
                      "shapes": {s: {"parameters_m": round(params[s] / 1e6, 2), "rtf_median": round(statistics.median(v), 3),
                                     "rtf_runs": [round(x, 3) for x in v],
                                     "batched": {n: {"ms_per_tick": round(statistics.median(x.ms_per_tick for x in levels[s, n]), 2),
                                                     "audio_x_realtime": round(statistics.median(
                                                         x.audio_x_realtime for x in levels[s, n]), 2)}
                                                 for n in args.sessions}}
                             for s, v in rtf.items()}}, indent=2))


if __name__ == "__main__":
    main()
