"""A/B of two fine stages by the independent judge: the shipped voice against a copy whose target
carries another fine stage (``voicespec train fine`` writes one). The backbone is the same, and each
sentence is decoded with the same seed by both, so the coarse codes are identical and only the
fine codes differ. PocketSphinx (not trained by us) transcribes both; the report gives WER/CER per
voice on the README's prompts and on corpus-grammar sentences no recipe trained on (another seed),
and the MCD-DTW between the two renderings. Run it alone on the machine:
``python scripts/fine_stage_ab.py runs/fine1/voice [--seeds 2] [--sentences 30] [--out ab.json]``."""

import argparse
import json
from pathlib import Path

import torch

import voicespec
from voicespec.eval.judge import PocketSphinxJudge
from voicespec.eval.quality import mcd_dtw
from voicespec.train.corpus import build_corpus

parser = argparse.ArgumentParser()
parser.add_argument("other", help="voice folder with the other fine stage")
parser.add_argument("--seeds", type=int, default=2, help="seeds per sentence (the same for both voices)")
parser.add_argument("--sentences", type=int, default=30, help="corpus-grammar sentences (seed 99)")
parser.add_argument("--out", default="out/fine_stage_ab.json")
args = parser.parse_args()

torch.set_num_threads(1)
voices = {"shipped": voicespec.Voice.from_pretrained(), "other": voicespec.Voice.from_pretrained(args.other)}
prompts = [line.strip() for line in Path("samples/prompts.txt").read_text().splitlines() if line.strip()]
sets = {"prompts": prompts, "corpus seed 99": [s.text for s in build_corpus(args.sentences, 99)]}
judge = PocketSphinxJudge()
report: dict = {}
for set_name, texts in sets.items():
    items: dict[str, list] = {name: [] for name in voices}
    mcd = []
    for text in texts:
        for seed in range(args.seeds):
            audio = {name: v.say(text, seed=seed, drafter="none") for name, v in voices.items()}  # plain: the same coarse draws
            for name, a in audio.items():
                items[name].append((text, torch.as_tensor(a.pcm), a.sample_rate))
            rate = audio["shipped"].sample_rate
            mcd.append(mcd_dtw(audio["shipped"].pcm, audio["other"].pcm, rate))
    scores = {name: judge.judge(x) for name, x in items.items()}
    report[set_name] = {name: {"wer": round(s.wer, 4), "cer": round(s.cer, 4), "words": s.words} for name, s in scores.items()}
    report[set_name]["mcd_dtw_between_db"] = round(float(sum(mcd) / len(mcd)), 2)
    print(set_name, json.dumps(report[set_name]))
Path(args.out).parent.mkdir(parents=True, exist_ok=True)
Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
print(f"wrote {args.out}")
