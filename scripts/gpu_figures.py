"""The GPU figures of scripts/gpu-check.sh: exactness of the shipped voice on the GPU (greedy,
batched vs alone, GPU vs CPU frames) and the batched engine at 1/16/64/256 sessions."""

from __future__ import annotations

import json
import sys

import torch

from voicespec.bench.batching import run_batching
from voicespec.bench.config import BUILTIN_PROMPTS
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer
from voicespec.pipeline.voice import load_voice

out: dict = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
greedy = SynthesisOptions(DecodeConfig(SamplingConfig(temperature=0), gamma=0, seed=0))
cpu, gpu = load_voice(None, "cpu"), load_voice(None, "cuda")
frames = {}
for name, voice in (("cpu", cpu), ("cuda", gpu)):
    stream = Synthesizer(voice).stream(BUILTIN_PROMPTS[0], greedy)
    list(stream)
    frames[name] = torch.cat(stream.frames, 1)
out["greedy_frames_cuda_equal_cpu"] = bool(torch.equal(frames["cpu"], frames["cuda"]))
out["greedy_frames_agree"] = float((frames["cpu"] == frames["cuda"]).float().mean()) if frames["cpu"].shape == frames["cuda"].shape else 0.0
print(json.dumps({k: out[k] for k in ("greedy_frames_cuda_equal_cpu", "greedy_frames_agree")}))
for dtype in ("bfloat16", "float32"):
    voice = load_voice(None, "cuda", dtype)
    levels = run_batching(voice, BUILTIN_PROMPTS, (1, 16, 64, 256), max_steps=2000)
    out[f"batching_{dtype}"] = [lv.to_dict() for lv in levels]
    for lv in levels:
        print(dtype, lv, flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1)
