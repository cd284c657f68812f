"""Teacher audio and its resynthesis by one or more codecs, on a corpus's held-out clips, judged by
every independent judge (PocketSphinx, Whisper tiny.en, DNSMOS) with 95 % sentence-bootstrap
intervals, plus STOI: the codec half of ``voicespec evaluate``, without the LM, so decoders
trained on the same frozen codes can be compared on the very same codes.

    python scripts/codec_judges.py --data DATA --n 43 CODEC_DIR [CODEC_DIR ...] > codec_judges.md
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
import torchaudio.functional as AF
from pystoi import stoi

from voicespec.codec.model import Codec
from voicespec.eval.bootstrap import ratio_interval
from voicespec.eval.clips import heldout_clips
from voicespec.eval.voice_eval import JUDGES, judge_row

torch.set_num_threads(1)
p = argparse.ArgumentParser()
p.add_argument("--data", required=True)
p.add_argument("--n", type=int, default=43)
p.add_argument("--json", help="also write every figure here")
p.add_argument("codecs", nargs="+")
args = p.parse_args()
clips = heldout_clips(Path(args.data), args.n)
codecs = [Codec.from_folder(c) for c in args.codecs]
rate = codecs[0].sample_rate
teacher = [(i, None, text, AF.resample(a, sr, rate) if sr != rate else a, rate) for i, (_, text, a, sr) in enumerate(clips)]
rows = {"teacher": judge_row(teacher, JUDGES)}
for name, codec in zip(args.codecs, codecs):
    items = [(i, None, text, codec.decode(codec.encode(x))[: x.shape[0]], rate) for i, _, text, x, _ in teacher]
    row = judge_row(items, JUDGES)
    scores = [stoi(x.numpy(), y.numpy(), rate) for (_, _, _, x, _), (_, _, _, y, _) in zip(teacher, items)]
    value, low, high = ratio_interval(scores, [1.0] * len(scores), range(len(scores)))
    row["stoi"], row["ci95"]["stoi"] = round(value, 4), [round(low, 4), round(high, 4)]
    rows[f"resynth {name}"] = row
keys = ("wer", "whisper_wer", "dnsmos_ovrl", "dnsmos_sig", "dnsmos_bak", "dnsmos_p808", "stoi")
print(f"{len(clips)} held-out clips of {args.data}; 95 % intervals over sentences\n")
print("| audio | " + " | ".join(keys) + " |")
print("| --- |" + " --- |" * len(keys))
for name, row in rows.items():
    cells = [f"{row[k]:.3f} [{row['ci95'][k][0]:.3f}, {row['ci95'][k][1]:.3f}]" if k in row else "–" for k in keys]
    print(f"| {name} | " + " | ".join(cells) + " |")
if args.json:
    Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
