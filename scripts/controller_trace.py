"""What the adaptive γ controller does on the shipped voice, beside fixed γ and plain decoding:
per run, steps per second (all sessions together), the γ it chose (how many passes each), how many
passes drafted a tree, the median pass time (verify seconds per target pass), and after an
adaptive run the fitted costs, the rate it expects for each γ and each candidate tree's record.
The controller's memory is shared across the runs, as a server keeps it. ``--batch N`` decodes the
sentences N at a time as one batch (a server's decode worker under load). Run it alone on the
machine: ``python scripts/controller_trace.py [--gammas auto,4,3,auto] [--rounds 1] [--mode
sampling] [--batch 1] [--threads 1]``; ``auto-notree`` is the adaptive controller with no candidate trees."""

import argparse
import collections
import statistics
import time
from pathlib import Path

import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.controller import AdaptiveGamma, ControllerConfig, ControllerMemory, expected_steps, step_cost
from voicespec.engine.tree_shapes import tree_text
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.work import drive_batch
from voicespec.pipeline.voice import load_voice

parser = argparse.ArgumentParser()
parser.add_argument("--gammas", default="auto,4,3,auto", help="comma-separated: integers, auto or auto-notree")
parser.add_argument("--rounds", type=int, default=1)
parser.add_argument("--mode", choices=["sampling", "greedy"], default="sampling")
parser.add_argument("--drafter", default="feature")
parser.add_argument("--batch", type=int, default=1, help="sentences decoded together as one batch")
parser.add_argument("--threads", type=int, default=1, help="torch threads")
args = parser.parse_args()

torch.set_num_threads(args.threads)
voice = load_voice(None)
drafter = voice.drafter(args.drafter)
sampling = voice.sampled if args.mode == "sampling" else SamplingConfig(temperature=0)
texts = [line.strip() for line in Path("samples/prompts.txt").read_text().splitlines() if line.strip()]
prompts = [voice.prompt(ids) for text in texts for _, ids in voice.frontend.sentences(text)]
prompts = (prompts * -(-args.batch // len(prompts)))[: max(args.batch, len(prompts))]
memories = {"auto": voice.controller_memory(args.drafter), "auto-notree": ControllerMemory()}
for r in range(args.rounds):
    for spec in args.gammas.split(","):
        gamma = "auto" if spec.startswith("auto") else int(spec)
        controller = ControllerConfig(trees=()) if spec == "auto-notree" else ControllerConfig()
        decoder = SpecDecoder(voice.target, drafter, memory=memories.get(spec))
        chosen, passes, steps, trees, t0 = collections.Counter(), [], 0, 0, time.perf_counter()
        for first in range(0, len(prompts), args.batch):
            gens = [decoder.generate(p, DecodeConfig(sampling, gamma=gamma, seed=first + i,
                                                     max_steps=2000, controller=controller))
                    for i, p in enumerate(prompts[first: first + args.batch])]
            drive_batch([g.decode() for g in gens])
            for g in gens:
                chosen.update(g.stats.gammas)
                steps += g.stats.generated_steps
                trees += g.stats.tree_passes
                passes.append(g.stats.verify_s / max(g.stats.target_passes, 1))
        print(f"round {r} γ={spec} batch {args.batch}: {steps / (time.perf_counter() - t0):.1f} steps/s, pass "
              f"{statistics.median(passes) * 1e3:.2f} ms (median over sentences), γ chosen {sorted(chosen.items())}, "
              f"tree passes {trees}")
        if isinstance(g.controller, AdaptiveGamma):
            c, e = g.controller, g.controller.estimates
            print("  verify ms by positions 1..6", [round(c.verify_cost(n) * 1e3, 2) for n in range(1, 7)],
                  "commit ms by steps 1..6", [round(c.commit_cost(s) * 1e3, 2) for s in range(1, 7)])
            for k in range(7):
                n = expected_steps(c.alphas, k)
                print(f"  γ={k}: {n:.2f} steps per pass, expected {n / step_cost(k, e.draft_cost, c.verify_cost, c.commit_cost, n):.1f} steps/s")
            for tree in c.trees:
                rec, rate = e.trees.get(tree), c.tree_rate(tree)
                if rec is not None and rate is not None:
                    print(f"  tree {tree_text(tree)}: {rec.passes:.1f} passes (decayed), "
                          f"{rec.mean_steps(expected_steps(c.alphas, len(tree)), c.config.shrinkage):.2f} steps per pass, "
                          f"draft {rec.draft_ratio:.2f}x a chained step per depth, expected {rate:.1f} steps/s")
