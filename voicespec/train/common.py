"""What every training recipe shares: atomic checkpoints, the LR schedule, provenance."""

from __future__ import annotations

import math
import os
import platform
from pathlib import Path
from typing import Any

import torch


def save_atomic(obj: Any, path: Path) -> None:
    """``torch.save`` to a temporary file, then rename: a kill mid-write never leaves a torn checkpoint."""
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def cosine_lr_factor(step: int, trained_s: float, warmup_steps: int, minutes: float, final_frac: float,
                     max_steps: int = 0) -> float:
    """Linear warm-up, then cosine over the *time* budget (runs are budgeted in minutes, not steps;
    ``max_steps`` > 0 also caps it: whichever budget is nearer its end sets the schedule)."""
    warm = min(1.0, (step + 1) / max(warmup_steps, 1))
    frac = min(1.0, trained_s / max(minutes * 60, 1e-9))
    if max_steps:
        frac = max(frac, min(1.0, step / max_steps))
    return warm * (final_frac + (1 - final_frac) * 0.5 * (1 + math.cos(math.pi * frac)))


def hardware() -> str:
    where = f"CUDA {torch.cuda.get_device_name()}" if torch.cuda.is_available() else "CPU"
    return f"{platform.machine()} {where} x{os.cpu_count()} cores ({platform.processor() or 'cpu'})"
