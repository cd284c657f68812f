"""``voicespec demo``: the engine end to end on tiny random-weight models built from configs,
then one utterance through the whole text → WAV pipeline.

Until the trained default voice ships, this is the most complete real run: real ``transformers``
models, both layouts, both drafters, fixed and adaptive γ, greedy and sampling. Greedy runs are
checked token for token against plain decoding; speedups are medians of per-prompt ratios with
every method run on the same prompt back to back (so machine noise hits all of them alike) —
the interleaved runner of ``voicespec bench``, on models that need no voice folder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch

from voicespec.audio import write_audio_atomic
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer
from voicespec.pipeline.voice import Voice

from voicespec.bench.runner import Case, EngineMethod, run_interleaved
from voicespec.bench.summary import summarize
from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.drafters import ModelDrafter, NGramDrafter
from voicespec.pipeline.tiny import build_tiny_voice, codec_draft, flat_draft, tiny_codec_lm, tiny_flat


def _models():
    flat = tiny_flat(seed=1, n_layers=4, hidden=128, min_frames=40)
    delay = tiny_codec_lm(seed=2, n_layers=4, hidden=128, n_codebooks=4, codebook_size=64, min_frames=40)
    return {"flat": (flat, flat_draft(flat, 1)), "delay": (delay, codec_draft(delay, 1))}


def _speak(wav: Path) -> None:
    """The whole pipeline once: text → tiny random voice → streaming codec → a WAV file."""
    with tempfile.TemporaryDirectory() as tmp:
        voice = Voice.load(build_tiny_voice(Path(tmp) / "voice"))
        text = "Speculative decoding keeps every token exact: 2 drafts, 1 pass!"
        options = SynthesisOptions(DecodeConfig(voice.sampling, gamma="auto", seed=0), drafter="draft-model")
        pcm, stats = Synthesizer(voice).synthesize(text, options)
    write_audio_atomic(wav, pcm, stats.sample_rate)
    print(f"\nwrote {wav} through the full pipeline (tiny random voice, so it babbles): {stats.summary()}")


def run_demo(quick: bool = False, max_steps: int = 160, wav_out: str = "out/demo.wav") -> int:
    torch.manual_seed(0)
    prompts = [[3 + i, 4 + 2 * i, 5 + 3 * i, 7] for i in range(3 if quick else 8)]
    modes = {"greedy": SamplingConfig(temperature=0), "sampling": SamplingConfig(temperature=0.8, top_k=20)}
    failures = 0
    print(f"{'layout':7} {'mode':9} {'method':18} {'steps/s':>8} {'speedup':>8} {'accept':>7} {'len':>5}  check")
    for layout_name, (target, draft) in _models().items():
        methods = [
            EngineMethod("plain", target, None, 0),
            EngineMethod("ngram γ=4", target, NGramDrafter(), 4),
            EngineMethod("ngram auto", target, NGramDrafter(), "auto"),
            EngineMethod("draft-model γ=3", target, ModelDrafter(draft), 3),
            EngineMethod("draft-model auto", target, ModelDrafter(draft), "auto"),
        ]
        cases = [Case(str(i), target.layout.prompt(ids), max_steps) for i, ids in enumerate(prompts)]
        for mode, sampling in modes.items():
            runs = run_interleaved(methods, cases, sampling, warmup=0)
            for name, s in summarize(methods, runs, "plain", None, sampling.greedy).items():
                check = "-" if s.mismatches is None else ("identical" if not s.mismatches else f"MISMATCH x{s.mismatches}")
                failures += s.mismatches or 0
                print(
                    f"{layout_name:7} {mode:9} {name:18} {s.steps_per_s:8.0f} "
                    f"{s.speedup['median']:7.2f}x {s.acceptance_rate or 0.0:7.2f} {s.mean_accepted_length:5.2f}  {check}"
                )
    print("\nRandom-weight tiny models: speedups show the engine's overhead and the drafters' reach on")
    print("repetitive output, not the trained voice's numbers. 'len' = steps committed per target pass.")
    _speak(Path(wav_out))
    if failures:
        print(f"FAILED: {failures} greedy run(s) differed from plain decoding")
    return 1 if failures else 0
