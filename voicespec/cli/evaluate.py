"""``voicespec evaluate``: arguments, and the composition the runtime may not do itself — the
held-out clips come from a teacher corpus, the unseen-word clips from the training side's
teacher (:func:`voicespec.train.data.spoken_unseen_clips`), and :mod:`voicespec.eval.voice_eval` judges both."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from voicespec.cli.args import positive
from voicespec.paths import SAMPLES_DIR


def add_evaluate_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", help="voice folder or name (default: the shipped default voice)")
    p.add_argument("--asr", help="also report the in-repo CTC recognizer's CER (a recognizer folder)")
    p.add_argument("--data", required=True, help="teacher corpus (its held-out split is evaluated)")
    p.add_argument("--n", type=positive(int, "n"), default=12, help="held-out sentences (default 12)")
    p.add_argument("--unseen", type=positive(int, "unseen", allow_zero=True), default=12,
                   help="unseen-word sentences, spoken by the teacher now (default 12; 0: skip; needs the train extra)")
    p.add_argument("--drafter", help="drafter for the speculative runs (default: the voice's default "
                                     "drafter, or its first draft model if that is none)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default 0)")
    p.add_argument("--seeds", type=positive(int, "seeds"), default=3,
                   help="seeds of the sampled rows: --seed, --seed + 1, ... (default 3; pooled, and reported per seed)")
    p.add_argument("--judges", type=judge_list, default=",".join(JUDGES),
                   help=f"comma-separated judges (default {','.join(JUDGES)}; all need the eval extra)")
    p.add_argument("--codec", help="judge the voice with this codec folder instead of its own (a retrained decoder "
                                   "on the same frozen codes speaks the very same tokens)")
    p.add_argument("--lossy-top-k", type=positive(int, "lossy-top-k", allow_zero=True), default=0,
                   help="also judge speculative decoding under the LOSSY top-k acceptance rule "
                        "(rows sampled_lossy, greedy_lossy)")
    p.add_argument("--out", required=True, help="JSON report")
    p.add_argument("--samples", help="also write listening samples here: voice-NN.wav per line of --prompts and "
                                      "voice-mels.png (teacher vs codec vs generated)")
    p.add_argument("--prompts", default=str(SAMPLES_DIR / "prompts.txt"), help="one text per line, for --samples")


JUDGES = ("pocketsphinx", "whisper", "dnsmos")  # voicespec.eval.voice_eval.JUDGES, without importing torch


def judge_list(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in JUDGES]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"judges must be a comma-separated subset of {','.join(JUDGES)}, got {text!r}")
    return names


def _figure(r: dict, key: str, digits: int = 3) -> str:
    low, high = r["ci95"][key]
    return f"{r[key]:.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"


def print_table(report: dict) -> None:
    """Each section's rows: every judge's pooled figure with its 95 % interval."""
    columns = (("wer", "PocketSphinx WER"), ("whisper_wer", "Whisper WER"), ("dnsmos_ovrl", "DNSMOS OVRL"),
               ("dnsmos_sig", "SIG"), ("dnsmos_p808", "P.808"))
    for section in ("heldout", "unseen_words"):
        if section not in report:
            continue
        rows = report[section]
        keys = [k for k in ("teacher", "resynth", "sampled_plain", "sampled_spec", "greedy_plain", "sampled_lossy",
                            "greedy_lossy") if k in rows]
        shown = [(k, n) for k, n in columns if k in rows[keys[0]]]
        print(f"{section} ({rows['utterances']} sentences; sampled rows over seeds {rows['seeds']}; 95 % intervals):")
        print("  | row | " + " | ".join(n for _, n in shown) + " |")
        print("  | --- |" + " --- |" * len(shown))
        for key in keys:
            r = rows[key]
            extra = "".join(f"  {k} {r[k]:.2f}" for k in ("closed_wer", "inrepo_cer", "mcd_dtw_db", "rtf_median") if k in r)
            cells = " | ".join(_figure(r, k, 2 if k.startswith("dnsmos") else 3) for k, _ in shown)
            print(f"  | {key} | {cells} |{extra}")
        print(f"  greedy speculative == plain on every sentence: {rows['greedy_spec_equals_plain']}")
        if rows.get("sampled_spec_equals_plain") is not None:
            print(f"  sampled speculative == plain for every sentence and seed (invariant coupling): "
                  f"{rows['sampled_spec_equals_plain']}")
        if "clips" in rows:
            print(f"  {rows['clips']['judged']} distinct clips judged for {rows['clips']['in_rows']} in the rows")


def run_evaluate(args: argparse.Namespace) -> int:
    from voicespec.eval.clips import heldout_clips
    from voicespec.eval.voice_eval import evaluate_voice, write_voice_samples
    from voicespec.pipeline.voice import load_voice

    t0 = time.perf_counter()
    voice = load_voice(args.voice)
    if args.codec:
        from voicespec.codec.model import Codec
        from voicespec.pipeline.voice import Voice

        voice = Voice(voice.config, Codec.from_folder(args.codec), voice.target, voice.draft_dirs, voice.duration)
    unseen = []
    if args.unseen:
        from voicespec.train.data import spoken_unseen_clips

        unseen = spoken_unseen_clips(args.unseen, args.seed)
    seeds = list(range(args.seed, args.seed + args.seeds))
    report = evaluate_voice(voice, heldout_clips(Path(args.data), args.n), unseen, args.drafter, seeds,
                            args.asr and Path(args.asr), lossy_top_k=args.lossy_top_k, judges=args.judges)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print_table(report)
    if args.samples:
        prompts = [line.strip() for line in Path(args.prompts).read_text().splitlines() if line.strip()]
        written = write_voice_samples(voice, prompts, Path(args.data), Path(args.samples), args.seed)
        print(f"wrote {len(written)} sample files to {args.samples}")
    return 0
