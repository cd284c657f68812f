"""A/B of fine stages by the independent judge, against the base stage's own sampling spread.

Each sentence is spoken once by the base voice (the shipped one unless ``--base``; plain decoding,
seed s): its coarse codes and the hidden states that predicted them are then fixed, and every arm
re-draws every other code of each step (codebooks 1..K-1; with G frames a step, the later frames'
too) from them with its own fine stage and the *same* uniforms (seed s + 1000). So arms differ only
in their fine stage's distribution, and the base stage re-drawn ("base'") is the yardstick: how far
two draws of the same distribution already are. Reported per set and arm: PocketSphinx WER (not
trained by us), MCD-DTW to the base's first rendering (base vs base' is the spread a new stage
should stay within), and a paired bootstrap 95 % interval of the WER difference to base' (resampling
texts, each with all its seeds). On the CPU, whatever the machine. Run it alone on the machine:
``python scripts/fine_stage_ab.py NAME=VOICE_DIR [...] [--base VOICE_DIR] [--seeds 2] [--sentences 30] [--out ab.json]``."""

import argparse
import json
from pathlib import Path

import torch

import voicespec
from voicespec.engine.sampling import choose_rows, draw_uniforms
from voicespec.eval.judge import PocketSphinxJudge, edit_distance, canonical_words
from voicespec.eval.quality import mcd_dtw
from voicespec.lm.codec_lm import FineStage
from voicespec.train.corpus import build_corpus
from voicespec.train.fine import spoken_frames

parser = argparse.ArgumentParser()
parser.add_argument("others", nargs="+", help="NAME=VOICE_DIR: voices whose target carries another fine stage")
parser.add_argument("--base", default=None, help="the voice that speaks and whose stage is the yardstick (default: the shipped one)")
parser.add_argument("--seeds", type=int, default=2, help="seeds per sentence")
parser.add_argument("--sentences", type=int, default=30, help="corpus-grammar sentences (seed 99)")
parser.add_argument("--out", default="out/fine_stage_ab.json")
args = parser.parse_args()

torch.set_num_threads(1)
base = voicespec.Voice.from_pretrained(args.base, device="cpu")
stages: dict[str, FineStage] = {"base'": base.target.model.fine}
for spec in args.others:
    name, _, path = spec.partition("=")
    stages[name] = voicespec.Voice.from_pretrained(path, device="cpu").target.model.fine
config = base.target.model.config
K, C, G = config.n_codebooks, config.codebook_size, config.frames_per_step


@torch.inference_mode()
def redraw(stage: FineStage, h: torch.Tensor, frames: torch.Tensor, seed: int) -> torch.Tensor:
    """``frames [K, n]`` with every code but each step's backbone token (codebook 0 of its first frame)
    re-drawn by ``stage`` from the states ``h [ceil(n / G), D]`` that predicted them, uniforms of ``seed``."""
    coarse = frames[0, ::G]
    u = draw_uniforms(torch.Generator().manual_seed(seed), coarse.shape[0] * (stage.slots - 1)).view(-1, stage.slots - 1)
    pick = lambda logits, steps, s: choose_rows(logits, base.sampling, u[[j for _, j in steps], s - 1:s])  # noqa: E731
    return stage.generate([h], [coarse], torch.full((1, K), C), pick)[0][:, : frames.shape[1]]


def bootstrap(diff_errors: list[int], words: list[int], n: int = 2000) -> list[float]:
    """95 % interval of the corpus WER difference, resampling texts (per text: errors and words summed over its seeds)."""
    d, w = torch.tensor(diff_errors, dtype=torch.float), torch.tensor(words, dtype=torch.float)
    idx = torch.randint(len(d), (n, len(d)), generator=torch.Generator().manual_seed(0))
    stats = (d[idx].sum(1) / w[idx].sum(1)).sort().values
    return [round(float(stats[int(0.025 * n)]), 4), round(float(stats[int(0.975 * n)]), 4)]


judge = PocketSphinxJudge()
prompts = [line.strip() for line in Path("samples/prompts.txt").read_text().splitlines() if line.strip()]
sets = {"prompts": prompts, "corpus seed 99": [s.text for s in build_corpus(args.sentences, 99)]}
report: dict = {}
for set_name, texts in sets.items():
    arms = ["base", *stages]
    errors: dict[str, list[int]] = {a: [] for a in arms}
    mcd: dict[str, list[float]] = {a: [] for a in stages}
    words: list[int] = []
    for text in texts:
        sentences = [ids for _, ids in base.frontend.sentences(text)]
        for seed in range(args.seeds):
            spoken = spoken_frames(base, [base.prompt(ids) for ids in sentences], [seed] * len(sentences))
            frames = {"base": [f for f, _ in spoken]}
            for name, stage in stages.items():
                frames[name] = [redraw(stage, h, f, seed + 1000) if h is not None else f for f, h in spoken]
            audio = {a: torch.cat([base.codec.decode(f) for f in fs]) for a, fs in frames.items()}
            rate = base.codec.sample_rate
            for a in arms:
                hyp = judge.transcribe(audio[a], rate)
                errors[a].append(edit_distance(canonical_words(text), canonical_words(hyp)))
            for name in stages:
                mcd[name].append(mcd_dtw(audio["base"], audio[name], rate))
            words.append(len(canonical_words(text)))
    total = sum(words)
    rows = {}
    for a in arms:
        rows[a] = {"wer": round(sum(errors[a]) / total, 4), "words": total}
        if a != "base'":
            diff = [x - y for x, y in zip(errors[a], errors["base'"])]
            per_text = [sum(diff[i: i + args.seeds]) for i in range(0, len(diff), args.seeds)]
            rows[a]["wer_minus_base'_95ci"] = bootstrap(per_text, [sum(words[i: i + args.seeds]) for i in range(0, len(words), args.seeds)])
        if a in mcd:
            rows[a]["mcd_dtw_to_base_db"] = round(sum(mcd[a]) / len(mcd[a]), 2)
    report[set_name] = rows
    print(set_name, json.dumps(rows), flush=True)
Path(args.out).parent.mkdir(parents=True, exist_ok=True)
Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
print(f"wrote {args.out}")
