"""What every training recipe shares: the checkpointed run, atomic saves, the LR schedule, provenance."""

from __future__ import annotations

import json
import math
import os
import platform
import random
import time
from pathlib import Path
from typing import Any, Callable

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


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: the GPU when there is one (with TF32 matmuls: these recipes train in fp32), else the CPU."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(name)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    return device


def hardware(device: torch.device | str = "cpu") -> str:
    """Where a run trained: the recipes record it with every checkpoint they export."""
    device = torch.device(device)
    where = f"CUDA {torch.cuda.get_device_name(device)}" if device.type == "cuda" else "CPU"
    return f"{platform.machine()} {where} x{os.cpu_count()} cores ({platform.processor() or 'cpu'})"


class TrainingRun:
    """What every recipe's training loop shares: a run folder with one atomic checkpoint (model,
    optimizer, step, trained time, RNG states and the recipe's own fields), resumed when present;
    the optimizer step with clipping and time accounting; ``metrics.jsonl`` echoed to ``log``; a
    checkpoint every ``checkpoint_every_s`` seconds, so an interruption loses minutes, not the run.

    Use: construct (reads any checkpoint into ``state``: a recipe takes its model config from
    there on resume), build the model on ``device`` and its optimizer, ``attach`` them, then loop on ``update``,
    ``record`` and ``maybe_save`` until the budget is spent, and ``save`` at the end.
    """

    def __init__(self, out_dir: Path, seed: int = 0, threads: int = 0, checkpoint_every_s: float = 180.0,
                 log: Callable[[str], Any] = print, device: str = "cpu") -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        if threads:
            torch.set_num_threads(threads)
        torch.manual_seed(seed)
        self.rng = random.Random(seed)
        self.device = pick_device(device)
        self.path = self.out_dir / "checkpoint.pt"
        self.state: dict[str, Any] | None = (torch.load(self.path, map_location="cpu", weights_only=False)
                                             if self.path.is_file() else None)
        self.step, self.trained_s = 0, 0.0
        self.checkpoint_every_s, self.log = checkpoint_every_s, log
        self._last_save = time.perf_counter()

    def attach(self, model: torch.nn.Module, opt: torch.optim.Optimizer, fields: Callable[[], dict[str, Any]]) -> None:
        """The model and optimizer to train and checkpoint (restored, with the counters and RNG
        states, when resuming) and ``fields()``: the recipe's own entries for each checkpoint."""
        self.model, self.opt, self._fields = model, opt, fields
        if self.state is not None:
            model.load_state_dict(self.state["model"])
            opt.load_state_dict(self.state["optimizer"])
            self.step, self.trained_s = self.state["step"], self.state["trained_s"]
            self.rng.setstate(self.state["rng"])
            torch.set_rng_state(self.state["torch_rng"])
            self.log(f"resumed at step {self.step} ({self.trained_s / 60:.1f} min trained)")

    def update(self, loss: torch.Tensor, lr: float, started: float) -> float:
        """One optimizer step on ``loss`` at ``lr`` (gradient norm clipped to 1, returned); counts
        the step and the time since ``started`` (evaluation and checkpoints are not training time)."""
        for group in self.opt.param_groups:
            group["lr"] = lr
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        grad = torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.opt.step()
        self.step += 1
        self.trained_s += time.perf_counter() - started
        return float(grad)

    def record(self, rec: dict[str, Any]) -> None:
        line = json.dumps(rec)
        with (self.out_dir / "metrics.jsonl").open("a") as f:
            f.write(line + "\n")
        self.log(line)

    def save(self) -> None:
        save_atomic({"model": self.model.state_dict(), "optimizer": self.opt.state_dict(), "step": self.step,
                     "trained_s": self.trained_s, "rng": self.rng.getstate(), "torch_rng": torch.get_rng_state(),
                     **self._fields()}, self.path)
        self._last_save = time.perf_counter()

    def maybe_save(self) -> None:
        if time.perf_counter() - self._last_save > self.checkpoint_every_s:
            self.save()
