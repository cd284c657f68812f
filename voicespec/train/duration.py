"""Training the duration predictor: ``voicespec train duration``.

The model (:class:`~voicespec.frontend.duration.DurationModel`) and its folder live with the front
end; this is the recipe. Items are ``(character ids, frames per id)`` pairs, the frames from CTC
forced alignment (:func:`voicespec.train.ctc_align.align`). Training follows
:mod:`voicespec.train.asr`: ``out/checkpoint.pt`` rewritten atomically, ``--minutes`` a budget on
*total* training time across resumes, ``out/metrics.jsonl``, export to ``out/duration`` with
provenance and held-out metrics (and the per-character-mean baseline's, for scale) in
``config.extra``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from voicespec.frontend.duration import (
    DurationConfig, DurationModel, cumulative_round, length_mask, non_negative_ints,
)
from voicespec.train.common import TrainingRun, cosine_lr_factor, hardware
from voicespec.train.configs import DurationTrainConfig

Item = tuple[list[int], list[int]]  # (tokenizer ids, frames per id)


# --- data ----------------------------------------------------------------------------------------

def check_items(items: Sequence[Item], vocab_size: int, what: str = "items") -> list[Item]:
    """Items as lists of ints, each checked: same lengths, non-empty, ids in ``1..vocab_size-1``,
    durations non-negative integers with a positive total."""
    out = []
    for n, item in enumerate(items):
        try:
            ids, durs = item
            ids, durs = non_negative_ints(ids, "ids"), non_negative_ints(durs, "durations")
        except (TypeError, ValueError) as e:
            raise ValueError(f"{what}[{n}]: expected (ids, durations) of non-negative integers ({e})") from None
        if not ids or len(ids) != len(durs):
            raise ValueError(f"{what}[{n}]: need as many durations as ids, both non-empty "
                             f"({len(ids)} ids, {len(durs)} durations)")
        if not all(1 <= i < vocab_size for i in ids):
            raise ValueError(f"{what}[{n}]: ids must be in 1..{vocab_size - 1}")
        if sum(durs) == 0:
            raise ValueError(f"{what}[{n}]: durations sum to 0 frames")
        out.append((ids, durs))
    return out


def _batch(items: Sequence[Item]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Zero-padded ids ``[B, N]``, targets ``log(1 + d)`` ``[B, N]`` and lengths ``[B]``."""
    lengths = torch.tensor([len(ids) for ids, _ in items])
    ids = torch.zeros(len(items), int(lengths.max()), dtype=torch.long)
    target = torch.zeros(ids.shape)
    for i, (u, d) in enumerate(items):
        ids[i, : len(u)] = torch.tensor(u)
        target[i, : len(d)] = torch.log1p(torch.tensor(d, dtype=torch.float32))
    return ids, target, lengths


def _masked_mse(pred: torch.Tensor, target: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    mask = length_mask(lengths, pred.shape[1])
    return ((pred - target) ** 2 * mask).sum() / mask.sum()


# --- evaluation ----------------------------------------------------------------------------------

def char_mean_baseline(train: Sequence[Item]) -> dict[int, float]:
    """Mean frames per character id over the training items: the context-free baseline."""
    sums: dict[int, list[float]] = {}
    for ids, durs in train:
        for i, d in zip(ids, durs):
            s = sums.setdefault(i, [0.0, 0.0])
            s[0] += d
            s[1] += 1
    return {i: s / n for i, (s, n) in sums.items()}


def duration_errors(pairs: Sequence[tuple[Sequence[int], Sequence[int]]]) -> dict[str, float]:
    """(predicted, true) integer durations per utterance → mean absolute error in frames per
    character (pooled over characters) and median utterance-length relative error
    ``|sum pred - sum true| / sum true``, and the mean signed relative length error (> 0: the
    predictions run long)."""
    chars = sum(len(t) for _, t in pairs)
    abs_err = sum(abs(p - t) for ps, ts in pairs for p, t in zip(ps, ts))
    signed = [(sum(p) - sum(t)) / max(sum(t), 1) for p, t in pairs]
    return {"mae_frames_per_char": abs_err / max(chars, 1),
            "length_rel_error_median": statistics.median(abs(r) for r in signed) if signed else 0.0,
            "length_rel_bias_mean": statistics.fmean(signed) if signed else 0.0}


@torch.no_grad()
def evaluate_duration(model: DurationModel, items: Sequence[Item],
                      baseline: dict[int, float] | None = None) -> dict[str, Any]:
    """Held-out metrics of :meth:`DurationModel.predict` (rate 1) against the true durations;
    with ``baseline`` (:func:`char_mean_baseline`) the same metrics for it, for scale."""
    if not items:
        return {}
    preds = [model.predict(ids) for ids, _ in items]
    out: dict[str, Any] = duration_errors([(p, d) for p, (_, d) in zip(preds, items)])
    was_training = model.training
    model.eval()
    ids, target, lengths = _batch(items)
    out["mse_log1p"] = float(_masked_mse(model(ids, lengths), target, lengths))
    model.train(was_training)
    out["utterances"] = len(items)
    out["chars"] = sum(len(i) for i, _ in items)
    if baseline is not None:
        fallback = statistics.fmean(baseline.values()) if baseline else 0.0
        base = [cumulative_round([baseline.get(i, fallback) for i in ids]) for ids, _ in items]
        out["char_mean_baseline"] = duration_errors([(p, d) for p, (_, d) in zip(base, items)])
    return out


# --- training ------------------------------------------------------------------------------------

def _epoch(lengths: Sequence[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Batches of indices of similar length (less padding), in random order."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] * (1 + 0.2 * (rng.random() - 0.5)))
    batches = [order[i: i + batch_size] for i in range(0, len(order), batch_size)]
    rng.shuffle(batches)
    return batches


def train_duration(items: Sequence[Item], heldout: Sequence[Item], out_dir: Path,
                   config: DurationTrainConfig = DurationTrainConfig(),
                   model_config: DurationConfig = DurationConfig(), log: Callable[[str], Any] = print,
                   source: str | None = None) -> Path:
    """Train (or resume) until ``config.minutes`` of total training time (or ``max_steps``);
    export; return the exported folder ``out_dir/duration``. On resume the checkpoint's model
    config wins. ``source``: where the items came from, for the provenance."""
    run = TrainingRun(out_dir, config.seed, config.threads, config.checkpoint_every_s, log)
    if run.state is not None:
        model_config = DurationConfig.from_dict(run.state["duration_config"])
    train = check_items(items, model_config.vocab_size, "items")
    heldout = check_items(heldout, model_config.vocab_size, "heldout")
    if not train:
        raise ValueError("no training items")
    model = DurationModel(replace(model_config, extra={}))
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    run.attach(model, opt, lambda: {"duration_config": model.config.to_dict(), "train_config": asdict(config)})
    if run.state is None:
        log(f"new run: {model.n_params() / 1e6:.2f} M parameters, {len(train)} train / {len(heldout)} held-out "
            f"utterances ({sum(len(i) for i, _ in train)} train characters)")
    batches: list[list[int]] = []
    model.train()
    while run.trained_s < config.minutes * 60 and not (config.max_steps and run.step >= config.max_steps):
        t0 = time.perf_counter()
        if not batches:
            batches = _epoch([len(i) for i, _ in train], config.batch_size, run.rng)
        ids, target, lengths = _batch([train[i] for i in batches.pop()])
        loss = _masked_mse(model(ids, lengths), target, lengths)
        lr = config.lr * cosine_lr_factor(run.step, run.trained_s, config.warmup_steps, config.minutes,
                                          config.final_lr_frac, config.max_steps)
        grad = run.update(loss, lr, t0)
        if run.step % config.log_every_steps == 0:
            run.record({"step": run.step, "trained_min": round(run.trained_s / 60, 3), "loss": loss.item(),
                        "grad_norm": grad, "lr": lr})
        if heldout and run.step % config.eval_every_steps == 0:
            run.record({"step": run.step, "trained_min": round(run.trained_s / 60, 3),
                        "heldout": evaluate_duration(model, heldout)})
            model.train()
        run.maybe_save()
    run.save()
    return export_duration(out_dir, train, heldout, source)


def export_duration(out_dir: Path, train: Sequence[Item] = (), heldout: Sequence[Item] = (),
                    source: str | None = None) -> Path:
    """Write ``out_dir/duration`` from the checkpoint, with provenance and held-out metrics (and
    the per-character-mean baseline's, for scale) in ``config.extra``."""
    state = torch.load(Path(out_dir) / "checkpoint.pt", map_location="cpu", weights_only=False)
    config = DurationConfig.from_dict(state["duration_config"])
    model = DurationModel(config)
    model.load_state_dict(state["model"])
    model.eval()
    metrics = evaluate_duration(model, heldout, char_mean_baseline(train) if train else None) if heldout else {}
    extra = {
        "training": {"steps": state["step"], "trained_minutes": round(state["trained_s"] / 60, 2),
                     "hardware": hardware(),
                     "data": source, "train_utterances": len(train), "recipe": "voicespec train duration",
                     "train_config": state["train_config"], "parameters": model.n_params()},
        "heldout_metrics": metrics,
        "target": f"log(1 + frames) per character; frames at {config.frame_rate:g} Hz (CTC forced alignment)",
    }
    model.config = replace(config, extra=extra)
    model.save(Path(out_dir) / "duration")
    return Path(out_dir) / "duration"


# --- command line --------------------------------------------------------------------------------

def read_items(path: str | Path) -> tuple[list[Item], list[Item]]:
    """(train, heldout) items from a JSONL file of ``{"ids", "durations", "split"}`` records
    (``split`` defaults to ``"train"``)."""
    path = Path(path)
    train: list[Item] = []
    heldout: list[Item] = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            item = (rec["ids"], rec["durations"])
            split = rec.get("split", "train")
        except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}:{n}: expected a JSON object with ids and durations ({e})") from None
        if split not in ("train", "heldout"):
            raise ValueError(f"{path}:{n}: split must be 'train' or 'heldout', got {split!r}")
        (train if split == "train" else heldout).append(item)
    return train, heldout


def run_duration(args: argparse.Namespace) -> int:
    train, heldout = read_items(args.items)
    config = DurationTrainConfig(minutes=args.minutes, max_steps=args.max_steps, seed=args.seed, threads=args.threads)
    folder = train_duration(train, heldout, Path(args.out), config, DurationConfig(units=args.units),
                            source=str(args.items))
    metrics = DurationModel.from_folder(folder).config.extra.get("heldout_metrics", {})
    summary = (f" (held-out MAE {metrics['mae_frames_per_char']:.2f} frames/char, median length error "
               f"{100 * metrics['length_rel_error_median']:.1f}%)") if metrics else ""
    print(f"exported {folder}{summary}")
    return 0
