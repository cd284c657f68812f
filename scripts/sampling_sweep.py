"""Which sampling settings a voice should ship with (or which of two voices speaks better), by the
judges nobody here trained.

Each setting of each voice (``--voice``, repeatable: the same sentences and seeds for all) speaks
the first ``--n`` held-out sentences of a teacher corpus with plain decoding, ``--seeds`` seeds
each (sentence ``i`` with seed ``s + 100 i``, as ``voicespec evaluate`` does), and Whisper tiny.en
and DNSMOS judge every clip. Reported per voice and setting: pooled Whisper WER and DNSMOS OVRL /
SIG / P.808 with 95 % bootstrap intervals over sentences, and the paired difference to the first
voice's first setting (same sentences, same seeds; the interval resamples sentences with all their
seeds), which is what decides between arms: one run's WER moves by ±0.05 on its own. A setting is
a JSON object of sampling fields over the voice's own (``{}`` is the voice as shipped;
``{"temperature": 0}`` is greedy, one seed). Run it alone on the machine:
``python scripts/sampling_sweep.py [--voice A --voice B] --data data/teacher2 --n 30 --seeds 3 '{}' '{"temperature": 0.5}' --out sweep.json``.
``--fresh 6237`` instead of ``--data`` needs no teacher audio (the judges hear only the voices)."""

import argparse
import itertools
import json
from dataclasses import replace
from pathlib import Path

import torch

from voicespec.engine.config import DecodeConfig
from voicespec.eval.bootstrap import ratio_interval
from voicespec.eval.clips import heldout_clips
from voicespec.eval.dnsmos import dnsmos
from voicespec.eval.whisper import whisper_judge
from voicespec.pipeline.synthesis import SynthesisOptions, Synthesizer
from voicespec.pipeline.voice import load_voice
from voicespec.train.corpus import iter_sentences

parser = argparse.ArgumentParser()
parser.add_argument("settings", nargs="+", help="JSON objects of sampling fields (the first is the baseline)")
parser.add_argument("--voice", action="append", help="voice name or folder (repeat to compare; default: the default voice)")
source = parser.add_mutually_exclusive_group(required=True)
source.add_argument("--data", help="teacher corpus (its held-out split)")
source.add_argument("--fresh", type=int, metavar="START",
                    help="instead, the corpus grammar's sentences (seed 0) from id START on: from 6237 on, past the "
                         "last of data/teacher2, none any shipped voice trained on, and none of the held-out ones "
                         "`voicespec evaluate` judges (a choice made on them is judged apart from them)")
parser.add_argument("--n", type=int, default=30)
parser.add_argument("--seeds", type=int, default=3)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--out", default=None, help="JSON report")
args = parser.parse_args()
torch.set_num_threads(args.threads)

if args.data:
    texts = [text for _, text, _, _ in heldout_clips(Path(args.data), args.n)]
else:
    texts = [s.text for s in itertools.islice(iter_sentences(0), args.fresh, args.fresh + args.n)]
judge = whisper_judge()
per: dict[str, list[dict]] = {}  # "voice setting" -> per clip: sentence, seed, word errors, words, DNSMOS
voices: list[str] = []  # as loaded
for name in args.voice or [None]:
    voice = load_voice(name)
    voices.append(name or voice.name)
    synth = Synthesizer(voice)
    for setting in args.settings:
        sampling = replace(voice.sampling, **json.loads(setting))
        seeds = range(1 if sampling.greedy else args.seeds)
        arm = f"{voices[-1]} {setting}"
        if arm in per:
            raise SystemExit(f"{arm}: given twice")
        rows = per[arm] = []
        for i, text in enumerate(texts):
            for s in seeds:
                stream = synth.stream(text, SynthesisOptions(DecodeConfig(sampling, gamma=0, seed=s + 100 * i), drafter="none"))
                pcm = torch.cat([c.pcm for c in stream])
                rate = stream.stats.sample_rate
                item = judge.judge([(text, pcm, rate)]).items[0]
                rows.append({"sentence": i, "seed": s, "errors": item["word_errors"], "words": item["words"],
                             "hyp": item["hyp"], **dnsmos(pcm, rate)})
        print(f"{arm}: {len(rows)} clips", flush=True)


def summary(rows: list[dict]) -> dict:
    groups = [r["sentence"] for r in rows]
    out = {"clips": len(rows)}
    out["whisper_wer"] = ratio_interval([r["errors"] for r in rows], [r["words"] for r in rows], groups)
    for key in ("ovrl", "sig", "p808"):
        out[f"dnsmos_{key}"] = ratio_interval([r[key] for r in rows], [1.0] * len(rows), groups)
    return out


def paired(base: list[dict], rows: list[dict]) -> dict:
    """The difference arm - baseline, clip by clip on the same sentence and seed. A greedy arm (one
    run a sentence: its audio does not depend on the seed) or baseline stands for every seed of the
    other, so the difference is that of the pooled figures."""
    def seeds_of(arm: list[dict]) -> int:
        return len({r["seed"] for r in arm})

    def keyed(arm: list[dict], other: list[dict]) -> dict[tuple[int, int], dict]:
        if seeds_of(arm) == 1 < seeds_of(other):
            return {(r["sentence"], o["seed"]): r for r in arm for o in other if o["sentence"] == r["sentence"]}
        return {(r["sentence"], r["seed"]): r for r in arm}

    by_base, by_arm = keyed(base, rows), keyed(rows, base)
    pairs = [(by_base[k], by_arm[k]) for k in sorted(by_base.keys() & by_arm.keys())]
    groups = [b["sentence"] for b, _ in pairs]
    out = {"whisper_wer": ratio_interval([r["errors"] - b["errors"] for b, r in pairs], [b["words"] for b, _ in pairs], groups)}
    for key in ("ovrl", "sig", "p808"):
        out[f"dnsmos_{key}"] = ratio_interval([r[key] - b[key] for b, r in pairs], [1.0] * len(pairs), groups)
    return out


report = {"voices": voices, "sentences": len(texts), "source": args.data or f"fresh from {args.fresh}", "seeds": args.seeds, "settings": {}}
base = next(iter(per.values()))
for setting, rows in per.items():
    entry = {"summary": summary(rows), "minus_first": paired(base, rows), "clips": rows}
    report["settings"][setting] = entry
    s, d = entry["summary"], entry["minus_first"]
    print(f"{setting:48s} WER {s['whisper_wer'][0]:.3f} [{s['whisper_wer'][1]:.3f}, {s['whisper_wer'][2]:.3f}]"
          f"  OVRL {s['dnsmos_ovrl'][0]:.2f} [{s['dnsmos_ovrl'][1]:.2f}, {s['dnsmos_ovrl'][2]:.2f}]"
          f"  P808 {s['dnsmos_p808'][0]:.2f}  | minus first: WER {d['whisper_wer'][0]:+.3f} "
          f"[{d['whisper_wer'][1]:+.3f}, {d['whisper_wer'][2]:+.3f}], OVRL {d['dnsmos_ovrl'][0]:+.3f} "
          f"[{d['dnsmos_ovrl'][1]:+.3f}, {d['dnsmos_ovrl'][2]:+.3f}]")
if args.out:
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
