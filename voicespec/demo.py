"""``voicespec demo``: the engine end to end on tiny random-weight models built from configs,
then one utterance through the whole text → WAV pipeline.

Until the trained default voice ships, this is the most complete real run: real ``transformers``
models, both layouts, both drafters, fixed and adaptive γ, greedy and sampling. Greedy runs are
checked token for token against plain decoding; speedups are medians of per-prompt ratios with
every method run on the same prompt back to back (so machine noise hits all of them alike).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch

from .audio import write_audio_atomic
from .synthesis import SynthesisOptions, Synthesizer
from .voice import Voice

from .decoder import DecodeConfig, SpecDecoder
from .drafters import ModelDrafter, NGramDrafter
from .sampling import SamplingConfig
from .tiny import build_tiny_voice, codec_draft, flat_draft, tiny_codec_lm, tiny_flat


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
        methods = {
            "plain": (None, 0),
            "ngram γ=4": (NGramDrafter(), 4),
            "ngram auto": (NGramDrafter(), "auto"),
            "draft-model γ=3": (ModelDrafter(draft), 3),
            "draft-model auto": (ModelDrafter(draft), "auto"),
        }
        for mode, sampling in modes.items():
            rows = {m: {"steps": 0, "secs": 0.0, "ratios": [], "drafted": 0, "accepted": 0, "passes": 0} for m in methods}
            mismatches = {m: 0 for m in methods}
            for i, ids in enumerate(prompts):
                prompt = target.layout.prompt(ids)
                base_tokens, base_rate = None, None
                for name, (drafter, gamma) in methods.items():
                    config = DecodeConfig(sampling, gamma=gamma, max_steps=max_steps, seed=i)
                    gen = SpecDecoder(target, drafter, config).generate(prompt)
                    t0 = time.perf_counter()
                    gen.run()
                    secs = time.perf_counter() - t0
                    s, r = gen.stats, rows[name]
                    r["steps"] += s.generated_steps
                    r["secs"] += secs
                    r["drafted"] += s.drafted
                    r["accepted"] += s.accepted
                    r["passes"] += s.target_passes
                    rate = s.generated_steps / secs
                    if base_tokens is None:
                        base_tokens, base_rate = gen.generated.clone(), rate
                    elif mode == "greedy" and not torch.equal(gen.generated, base_tokens):
                        mismatches[name] += 1
                    r["ratios"].append(rate / base_rate)
            for name, r in rows.items():
                acc = r["accepted"] / r["drafted"] if r["drafted"] else 0.0
                check = "-" if mode != "greedy" else ("identical" if not mismatches[name] else f"MISMATCH x{mismatches[name]}")
                failures += mismatches[name]
                print(
                    f"{layout_name:7} {mode:9} {name:18} {r['steps'] / r['secs']:8.0f} "
                    f"{statistics.median(r['ratios']):7.2f}x {acc:7.2f} {r['steps'] / r['passes']:5.2f}  {check}"
                )
    print("\nRandom-weight tiny models: speedups show the engine's overhead and the drafters' reach on")
    print("repetitive output, not the trained voice's numbers. 'len' = steps committed per target pass.")
    _speak(Path(wav_out))
    if failures:
        print(f"FAILED: {failures} greedy run(s) differed from plain decoding")
    return 1 if failures else 0
