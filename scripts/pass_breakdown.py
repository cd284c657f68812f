"""Where a speculative pass's time goes, inside real decodes: per-call timers around the target's
forward, the drafter's tree, the tree's warp, verdict and cache move, and the fine stage, for a
static tree against plain decoding (the sample prompts; the default voice unless ``--voice``;
greedy unless ``--sampling``: the voice's own settings), the two interleaved sentence by sentence
so that both see the same machine minutes. Prints the median and the per-pass mean of each part
and the wall time per pass; the parts do not add up to the wall time (the rest is the decoder's
own bookkeeping). Run it alone on the machine:
``python scripts/pass_breakdown.py [--tree 2,2,1,1 | 3/2,1,0/2,1,1] [--threads 1] [--prompts 6] [--voice NAME] [--sampling]``."""

import argparse
import inspect
import statistics
import time
from pathlib import Path

import torch

from voicespec.engine import decoder, policy, step_lm
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.drafters.feature import HeadsSession
from voicespec.lm.codec_lm import CodecLMSession, FineWork
from voicespec.lm.llama import LlamaStack
from voicespec.options import parse_tree
from voicespec.pipeline.voice import load_voice

parser = argparse.ArgumentParser()
parser.add_argument("--tree", default="2,2,1,1")
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--prompts", type=int, default=6, help="lines of samples/prompts.txt to decode")
parser.add_argument("--voice", default=None, help="voice folder or name (default: the default voice)")
parser.add_argument("--sampling", action="store_true", help="the voice's sampling settings (default: greedy)")
args = parser.parse_args()

torch.set_num_threads(args.threads)
seconds: dict[str, dict[str, list[float]]] = {}  # per method, per part
method = ""  # the method decoding now


def timed(owner, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper that records its seconds under ``label``."""
    static = isinstance(inspect.getattr_static(owner, name), (classmethod, staticmethod))
    run = getattr(owner, name)

    def wrapped(*a, **k):
        t = time.perf_counter()
        out = run(*a, **k)
        seconds[method].setdefault(label, []).append(time.perf_counter() - t)
        return out
    setattr(owner, name, staticmethod(wrapped) if static else wrapped)


PARTS = ((step_lm, "forward_batch", "target forward"), (LlamaStack, "_span", "  its layers"),
         (CodecLMSession, "embed_batch", "  its embeddings"), (HeadsSession, "propose_tree", "draft tree"),
         (policy.TokenPolicy, "warp_tree", "tree warp"), (decoder, "verify_tree_greedy", "tree verdict"),
         (decoder, "verify_tree_sampling", "tree verdict"),
         (step_lm.LMSession, "keep_path", "tree cache move"), (FineWork, "run", "fine stage"))
for owner, name, label in PARTS:
    timed(owner, name, label)

voice = load_voice(args.voice)
texts = [line.strip() for line in Path("samples/prompts.txt").read_text().splitlines() if line.strip()][: args.prompts]
prompts = [voice.prompt(ids) for text in texts for _, ids in voice.frontend.sentences(text)]
spec = decoder.SpecDecoder(voice.target, voice.drafter("feature"))
tree = parse_tree(args.tree)
methods = {f"tree {args.tree}": tree, "plain": None}
totals = {name: [0, 0, 0.0] for name in methods}  # passes, steps, seconds
for i, prompt in enumerate([prompts[0], *prompts]):  # the first one twice: a warm-up
    for method, shape in methods.items():
        seconds.setdefault(method, {})
        sampling = voice.sampling if args.sampling else SamplingConfig(temperature=0)
        generation = spec.generate(prompt, DecodeConfig(sampling, gamma=0 if shape is None else 4, tree=shape, seed=i,
                                                        max_steps=2000))
        t0 = time.perf_counter()
        generation.run()
        if i == 0:
            seconds[method].clear()
            continue
        total = totals[method]
        total[0] += generation.stats.target_passes
        total[1] += generation.stats.generated_steps
        total[2] += time.perf_counter() - t0
for method, (passes, steps, wall) in totals.items():
    print(f"{method}: {passes} passes, {steps / passes:.2f} steps per pass, {wall / passes * 1e3:.2f} ms per pass")
    for label, v in ((label, seconds[method][label]) for label in dict.fromkeys(p[-1] for p in PARTS) if label in seconds[method]):
        print(f"  {label:18s} median {statistics.median(v) * 1e3:6.3f} ms, per pass {sum(v) / passes * 1e3:6.3f} ms")
