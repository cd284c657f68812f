"""A/B of the CPU kernel for the target's multi-row products (voicespec/lm/linear.py) inside real
decodes: before every target pass and every fine-stage call the kernel (oneDNN over reordered
weights, or ``F.linear``) is chosen at random, so both sides see the same sentences, cache lengths
and machine minutes. Prints the median seconds per call by kernel and size (pass slots, fine-stage
frames), plain decoding and the tree 2,2,1,1, greedy. Run it alone on the machine:
``python scripts/kernel_ab.py [--rounds 2] [--threads 1]``."""

import argparse
import random
import statistics
import time
from pathlib import Path

import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.step_lm import Pass
from voicespec.lm.codec_lm import FineWork
from voicespec.pipeline.voice import load_voice

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=2)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()

torch.set_num_threads(args.threads)
voice = load_voice(None)
linears = voice.target.stack.linears
texts = [line.strip() for line in Path("samples/prompts.txt").read_text().splitlines() if line.strip()]
prompts = [voice.prompt(ids) for text in texts for _, ids in voice.frontend.sentences(text)]
rng, seconds = random.Random(0), {}


def timed(kind, size_of):
    """``kind.run`` with the kernel drawn per call and its seconds recorded by (kind, kernel, size)."""
    run = kind.run.__func__

    def wrapped(cls, works):
        linears.enabled = rng.random() < 0.5
        t = time.perf_counter()
        out = run(cls, works)
        key = (kind.__name__, "oneDNN" if linears.enabled else "F.linear", size_of(works[0]))
        seconds.setdefault(key, []).append(time.perf_counter() - t)
        return out
    kind.run = classmethod(wrapped)


timed(Pass, lambda w: w.steps.shape[0])
timed(FineWork, lambda w: w.coarse.shape[0])
decoder = SpecDecoder(voice.target, voice.drafter("feature"))
for _ in range(args.rounds):
    for tree in (None, (2, 2, 1, 1)):
        for i, prompt in enumerate(prompts):
            decoder.generate(prompt, DecodeConfig(SamplingConfig(temperature=0), gamma=0 if tree is None else 4,
                                                  tree=tree, seed=i, max_steps=2000)).run()
for (kind, kernel, size), v in sorted(seconds.items()):
    if len(v) >= 20:
        print(f"{kind:9s} size {size:2d} {kernel:8s} {statistics.median(v) * 1e3:6.3f} ms ({len(v)} calls)")
