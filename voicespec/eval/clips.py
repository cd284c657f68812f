"""Reading held-out clips back from a teacher corpus folder (``manifest.jsonl`` + ``wav/``)."""

from __future__ import annotations

import json
from pathlib import Path

import soundfile as sf
import torch


def heldout_clips(data_dir: Path, n: int) -> list[tuple[str, str, torch.Tensor, int]]:
    """(id, text, audio, rate) of the first ``n`` held-out clips of a teacher corpus."""
    out = []
    for line in (data_dir / "manifest.jsonl").read_text().splitlines():
        rec = json.loads(line)
        if rec.get("split") == "heldout":
            audio, sr = sf.read(str(data_dir / "wav" / f"{rec['id']}.wav"), dtype="float32")
            out.append((rec["id"], rec.get("text", ""), torch.from_numpy(audio), sr))
            if len(out) == n:
                break
    return out
