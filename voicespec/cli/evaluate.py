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
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--lossy-top-k", type=positive(int, "lossy-top-k", allow_zero=True), default=0,
                   help="also judge speculative decoding under the LOSSY top-k acceptance rule "
                        "(rows sampled_lossy, greedy_lossy)")
    p.add_argument("--out", required=True, help="JSON report")
    p.add_argument("--samples", help="also write listening samples here: voice-NN.wav per line of --prompts and "
                                      "voice-mels.png (teacher vs codec vs generated)")
    p.add_argument("--prompts", default=str(SAMPLES_DIR / "prompts.txt"), help="one text per line, for --samples")


def run_evaluate(args: argparse.Namespace) -> int:
    from voicespec.eval.clips import heldout_clips
    from voicespec.eval.voice_eval import ROWS, evaluate_voice, write_voice_samples
    from voicespec.pipeline.voice import load_voice

    t0 = time.perf_counter()
    voice = load_voice(args.voice)
    unseen = []
    if args.unseen:
        from voicespec.train.data import spoken_unseen_clips

        unseen = spoken_unseen_clips(args.unseen, args.seed)
    report = evaluate_voice(voice, heldout_clips(Path(args.data), args.n), unseen, args.drafter, args.seed,
                            args.asr and Path(args.asr), lossy_top_k=args.lossy_top_k)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    for section in ("heldout", "unseen_words"):
        if section not in report:
            continue
        print(f"{section} ({report[section]['utterances']} sentences), judged by PocketSphinx:")
        for key in (*ROWS, "sampled_lossy", "greedy_lossy"):
            if key not in report[section]:
                continue
            r = report[section][key]
            extra = "".join(f"  {k} {r[k]:.2f}" for k in ("closed_wer", "inrepo_cer", "mcd_dtw_db", "rtf_median") if k in r)
            print(f"  {key:14s} WER {r['wer']:.3f}  CER {r['cer']:.3f}{extra}")
        print(f"  greedy speculative == plain on every sentence: {report[section]['greedy_spec_equals_plain']}")
    if args.samples:
        prompts = [line.strip() for line in Path(args.prompts).read_text().splitlines() if line.strip()]
        written = write_voice_samples(voice, prompts, Path(args.data), Path(args.samples), args.seed)
        print(f"wrote {len(written)} sample files to {args.samples}")
    return 0
