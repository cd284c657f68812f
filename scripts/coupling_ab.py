"""The two exact couplings on the shipped voice, interleaved: decode time per second of audio for
plain decoding and for speculation under each coupling (γ auto and 4), and the speedups.

    python scripts/coupling_ab.py [--seeds 3]

Sampled at the voice's own settings, the default drafter (its feature heads), 1 thread."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import replace

import torch

from voicespec.engine.config import DecodeConfig
from voicespec.pipeline.synthesis import SynthesisOptions, SynthesisStream
from voicespec.pipeline.voice import load_voice

TEXTS = ["A cold wind swept across the harbour before dawn.", "Please call me back when you get this message.",
         "The museum opens at nine and closes at five.", "She counted seven boats drifting toward the shore."]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(1)
    voice = load_voice(None)
    methods = {"plain": ("invariant", 0), "invariant auto": ("invariant", "auto"), "residual auto": ("residual", "auto"),
               "invariant 4": ("invariant", 4), "residual 4": ("residual", 4)}
    for text in TEXTS[:1]:  # warm-up
        for coupling, gamma in methods.values():
            list(SynthesisStream(voice, text, SynthesisOptions(DecodeConfig(voice.sampled, gamma=gamma, seed=0))))
    per = {m: [] for m in methods}  # decode seconds per audio second, per run
    for seed in range(1, args.seeds + 1):
        for text in TEXTS:
            for name, (coupling, gamma) in methods.items():
                sampling = replace(voice.sampled, coupling=coupling)
                stream = SynthesisStream(voice, text, SynthesisOptions(DecodeConfig(sampling, gamma=gamma, seed=seed)))
                list(stream)
                per[name].append(stream.stats.decode.total_s / (stream.stats.samples / stream.stats.sample_rate))
    plain = statistics.median(per["plain"])
    print(f"shipped voice, {len(TEXTS)} sentences x {args.seeds} seeds, interleaved, 1 thread; decode s per audio s (median)")
    for name, values in per.items():
        m = statistics.median(values)
        print(f"{name:15s} {m:.3f}   speedup over plain {plain / m:.2f}x")


if __name__ == "__main__":
    main()
