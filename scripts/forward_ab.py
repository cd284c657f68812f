"""A/B on the shipped voice: plain decoding with the plain-torch forward on a position-addressed cache
vs the ``transformers`` forward on a ``DynamicCache``. Interleaved rounds (who goes first alternates),
median streaming RTF, 1 thread, and whether both gave the same frames. Run it alone on the machine:
``python scripts/forward_ab.py``."""

import statistics

import torch

from voicespec.engine.config import DecodeConfig
from voicespec.lm.codec_lm import CodecStepLM
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer
from voicespec.pipeline.voice import load_voice

torch.set_num_threads(1)
voice = load_voice(None)
methods = {"static": voice.target, "transformers": CodecStepLM(voice.target.model, static=False)}
texts = ["The quick brown fox jumps over the lazy dog.",
         "Please call Stella and ask her to bring these things with her from the store."]
synth = Synthesizer(voice)
rtf: dict[str, list[float]] = {k: [] for k in methods}
frames: dict[tuple[str, str], list] = {}
for rnd in range(5):
    for name in (list(methods) if rnd % 2 == 0 else list(reversed(methods))):
        voice.target = methods[name]
        for text in texts:
            stream = synth.stream(text, SynthesisOptions(DecodeConfig(voice.sampling, gamma=0, seed=1), drafter="none"))
            list(stream)
            rtf[name].append(stream.stats.rtf)
            frames.setdefault((name, text), [f.tolist() for f in stream.frames])
same = all(frames[("static", t)] == frames[("transformers", t)] for t in texts)
print({k: round(statistics.median(v), 4) for k, v in rtf.items()}, "same frames:", same)
