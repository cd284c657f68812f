"""Honest quality numbers for a voice: ``voicespec evaluate``.

On held-out teacher sentences (texts the LM never trained on) the in-repo recognizer transcribes
(a) the teacher audio, (b) its codec resynthesis and (c) the voice's own speech, decoded with
speculation off and on; MCD-DTW compares generated and resynthesized speech with the teacher's.
Greedy decoding must give the same frames with and without speculation (checked per sentence);
sampled decoding gives a different draw of the same distribution, so its numbers are reported
for both and should agree within noise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch
import torchaudio.functional as AF
import torchaudio.transforms as T

from .audio import write_audio_atomic
from .decoder import DecodeConfig
from .quality import cer_report, mcd_dtw
from .sampling import SamplingConfig
from .synthesis import SynthesisOptions, Synthesizer
from .train.asr import load_asr
from .train.samples import heldout_clips
from .voice import Voice


def _generate(synth: Synthesizer, text: str, decode: DecodeConfig, drafter: str) -> tuple[torch.Tensor, Any]:
    stream = synth.stream(text, SynthesisOptions(decode, drafter=drafter))
    chunks = [c.pcm for c in stream]
    return (torch.cat(chunks) if chunks else torch.zeros(0)), stream


def speculative_default(voice: Voice) -> str:
    """The drafter the speculative rows use: the voice's default if it drafts at all, else its
    first shipped draft model, else n-gram (a voice that decodes plainly by default still gets
    its speculation and exactness measured)."""
    if voice.config.default_drafter != "none":
        return voice.config.default_drafter
    models = [name for name in voice.drafter_names if name not in ("none", "ngram")]
    return models[0] if models else "ngram"


def evaluate_voice(voice: Voice, asr_dir: Path, data_dir: Path, n: int = 12, drafter: str | None = None,
                   seed: int = 0, log=print) -> dict[str, Any]:
    asr = load_asr(asr_dir)
    drafter = drafter or speculative_default(voice)
    synth = Synthesizer(voice)
    rate = voice.codec.sample_rate
    sampled = DecodeConfig(voice.sampling, gamma="auto", seed=seed)
    greedy = DecodeConfig(SamplingConfig(temperature=0), gamma="auto", seed=seed)
    rows: dict[str, list] = {k: [] for k in ("teacher", "resynth", "sampled_plain", "sampled_spec", "greedy_plain")}
    mcd: dict[str, list[float]] = {"resynth": [], "sampled_plain": [], "sampled_spec": []}
    rtf: dict[str, list[float]] = {"sampled_plain": [], "sampled_spec": []}
    greedy_mismatches = 0
    clips = heldout_clips(data_dir, n)
    for i, (clip_id, text, audio, sr) in enumerate(clips):
        x = AF.resample(audio, sr, rate) if sr != rate else audio
        y = voice.codec.decode(voice.codec.encode(x))[: x.shape[0]]
        rows["teacher"].append((text, x, rate))
        rows["resynth"].append((text, y, rate))
        mcd["resynth"].append(mcd_dtw(x, y, rate))
        for key, config, name in (("sampled_plain", replace(sampled, gamma=0, seed=seed + 100 * i), "none"),
                                  ("sampled_spec", replace(sampled, seed=seed + 100 * i), drafter)):
            pcm, stream = _generate(synth, text, config, name)
            rows[key].append((text, pcm, rate))
            mcd[key].append(mcd_dtw(x, pcm, rate))
            rtf[key].append(stream.stats.rtf)
        plain_pcm, plain = _generate(synth, text, replace(greedy, gamma=0), "none")
        _, spec = _generate(synth, text, greedy, drafter)
        same = len(plain.frames) == len(spec.frames) and all(torch.equal(a, b) for a, b in zip(plain.frames, spec.frames))
        greedy_mismatches += not same
        rows["greedy_plain"].append((text, plain_pcm, rate))
        log(f"{clip_id}: {text[:50]!r} greedy spec == plain: {same}")
    report: dict[str, Any] = {"voice": voice.name, "drafter": drafter, "utterances": len(clips),
                              "sampling": voice.config.sampling, "seed": seed}
    for key, items in rows.items():
        r = cer_report(asr, items)
        report[key] = {"cer": r["cer"], "wer": r["wer"], "examples": r["items"][:3]}
        if key in mcd:
            report[key]["mcd_dtw_db"] = statistics.median(mcd[key])
        if key in rtf:
            report[key]["rtf_median"] = statistics.median(rtf[key])
    report["greedy_spec_equals_plain"] = greedy_mismatches == 0
    report["greedy_mismatches"] = greedy_mismatches
    report["cer_gap_generated_vs_resynth_points"] = 100 * (report["sampled_plain"]["cer"] - report["resynth"]["cer"])
    return report


def write_voice_samples(voice: Voice, prompts: list[str], data_dir: Path | None, out_dir: Path,
                        seed: int = 0) -> list[Path]:
    """``voice-NN.wav`` for each prompt with the voice's default settings, and (given a teacher
    corpus) ``voice-mels.png``: teacher vs codec vs generated mel spectrograms of one held-out
    sentence."""
    out_dir.mkdir(parents=True, exist_ok=True)
    synth = Synthesizer(voice)
    written = []
    for i, text in enumerate(prompts):
        decode = DecodeConfig(voice.sampling, seed=seed + i)
        pcm, _ = _generate(synth, text, decode, voice.config.default_drafter)
        path = out_dir / f"voice-{i:02d}.wav"
        write_audio_atomic(path, pcm, voice.codec.sample_rate)
        written.append(path)
    if data_dir is not None:
        written.append(_mel_figure(voice, synth, data_dir, out_dir / "voice-mels.png", seed))
    return written


def _mel_figure(voice: Voice, synth: Synthesizer, data_dir: Path, png: Path, seed: int) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    (clip_id, text, audio, sr), = heldout_clips(data_dir, 1)
    rate = voice.codec.sample_rate
    x = AF.resample(audio, sr, rate) if sr != rate else audio
    y = voice.codec.decode(voice.codec.encode(x))[: x.shape[0]]
    g, _ = _generate(synth, text, DecodeConfig(voice.sampling, seed=seed), voice.config.default_drafter)
    mel = T.MelSpectrogram(rate, n_fft=1024, hop_length=256, n_mels=80)
    fig, axes = plt.subplots(3, 1, figsize=(10, 7.5))
    for ax, (sig, name) in zip(axes, ((x, "teacher (Piper)"), (y, "codec resynthesis"), (g, "generated (codec LM)"))):
        ax.imshow(torch.log(mel(sig) + 1e-5).numpy(), origin="lower", aspect="auto", cmap="magma")
        ax.set_title(f"{name} — held-out {clip_id}: {text[:70]}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.tight_layout()
    fig.savefig(png, dpi=80)
    plt.close(fig)
    return png


def add_evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", help="voice folder or name (default: the shipped default voice)")
    p.add_argument("--asr", required=True, help="CTC recognizer folder (`voicespec train asr`)")
    p.add_argument("--data", required=True, help="teacher corpus (its held-out split is evaluated)")
    p.add_argument("--n", type=int, default=12, help="held-out sentences")
    p.add_argument("--drafter", help="drafter for the speculative runs (default: the voice's default "
                                                 "drafter, or its first draft model if that is none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="JSON report")
    p.add_argument("--samples", help="also write listening samples here: voice-NN.wav per line of --prompts and "
                                      "voice-mels.png (teacher vs codec vs generated)")
    p.add_argument("--prompts", default="samples/prompts.txt", help="one text per line, for --samples")


def run_evaluate(args: argparse.Namespace) -> int:
    from .cli import load_voice

    t0 = time.perf_counter()
    voice = load_voice(args.voice)
    report = evaluate_voice(voice, Path(args.asr), Path(args.data), args.n, args.drafter, args.seed)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for key in ("teacher", "resynth", "sampled_plain", "sampled_spec", "greedy_plain"):
        r = report[key]
        extra = "".join(f"  {k} {r[k]:.2f}" for k in ("mcd_dtw_db", "rtf_median") if k in r)
        print(f"{key:14s} CER {r['cer']:.3f}  WER {r['wer']:.3f}{extra}")
    print(f"greedy speculative == plain on every sentence: {report['greedy_spec_equals_plain']}")
    if args.samples:
        prompts = [line.strip() for line in Path(args.prompts).read_text().splitlines() if line.strip()]
        written = write_voice_samples(voice, prompts, Path(args.data), Path(args.samples), args.seed)
        print(f"wrote {len(written)} sample files to {args.samples}")
    return 0
