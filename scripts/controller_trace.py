"""What the adaptive γ controller does on the shipped voice, beside fixed γ: per run, steps per
second, the γ it chose (how many passes each), the median pass time (verify seconds per target
pass), and after an adaptive run the fitted costs and the rate it expects for each γ. The
controller's memory is shared across the runs, as a server keeps it. Run it alone on the machine:
``python scripts/controller_trace.py [--gammas auto,4,3,auto] [--rounds 1] [--mode sampling]``."""

import argparse
import collections
import statistics
import time
from pathlib import Path

import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.controller import AdaptiveGamma, expected_steps, step_cost
from voicespec.engine.decoder import SpecDecoder
from voicespec.pipeline.voice import load_voice

parser = argparse.ArgumentParser()
parser.add_argument("--gammas", default="auto,4,3,auto", help="comma-separated: integers or auto")
parser.add_argument("--rounds", type=int, default=1)
parser.add_argument("--mode", choices=["sampling", "greedy"], default="sampling")
parser.add_argument("--drafter", default="feature")
args = parser.parse_args()

torch.set_num_threads(1)
voice = load_voice(None)
drafter = voice.drafter(args.drafter)
sampling = voice.sampling if args.mode == "sampling" else SamplingConfig(temperature=0)
texts = [line.strip() for line in Path("samples/prompts.txt").read_text().splitlines() if line.strip()]
prompts = [voice.prompt(ids) for text in texts for _, ids in voice.frontend.sentences(text)]
memory = voice.controller_memory(args.drafter)
for r in range(args.rounds):
    for spec in args.gammas.split(","):
        gamma = spec if spec == "auto" else int(spec)
        decoder, chosen, passes, steps, t0 = SpecDecoder(voice.target, drafter, memory=memory), collections.Counter(), [], 0, time.perf_counter()
        for i, prompt in enumerate(prompts):
            g = decoder.generate(prompt, DecodeConfig(sampling, gamma=gamma, seed=i, max_steps=2000))
            g.run()
            chosen.update(g.stats.gammas)
            steps += g.stats.generated_steps
            passes.append(g.stats.verify_s / max(g.stats.target_passes, 1))
        print(f"round {r} γ={spec}: {steps / (time.perf_counter() - t0):.1f} steps/s, pass {statistics.median(passes) * 1e3:.2f} ms "
              f"(median over sentences), γ chosen {sorted(chosen.items())}")
        if isinstance(g.controller, AdaptiveGamma):
            c, e = g.controller, g.controller.estimates
            print("  verify ms by positions 1..6", [round(c.verify_cost(n) * 1e3, 2) for n in range(1, 7)],
                  "commit ms by steps 1..6", [round(c.commit_cost(s) * 1e3, 2) for s in range(1, 7)])
            for k in range(7):
                n = expected_steps(c.alphas, k)
                print(f"  γ={k}: {n:.2f} steps per pass, expected {n / step_cost(k, e.draft_cost, c.verify_cost, c.commit_cost, n):.1f} steps/s")
