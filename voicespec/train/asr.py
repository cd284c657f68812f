"""Training the character CTC recognizer: ``voicespec train asr``.

The model, its features and its folder are :mod:`voicespec.eval.recognizer`; forced alignment
with it is :mod:`voicespec.train.ctc_align`. Training follows ``train.codec``: ``out/checkpoint.pt``
rewritten atomically every few minutes, ``--minutes`` a budget on *total* training time across
resumes, ``out/metrics.jsonl``, held-out CER every N steps, export to ``out/asr``. Batches are
whole utterances, grouped by length (with a little jitter, so batches differ between epochs) up
to a padded-audio budget; SpecAugment frequency/time masks, random gain and light noise; AdamW;
CTC loss with ``zero_infinity``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import soundfile as sf
import torch
import torchaudio.functional as AF
import torchaudio.transforms as T
from torch.nn import functional as F

from voicespec.eval.judge import corpus_error_rates
from voicespec.eval.recognizer import BLANK, AsrConfig, CtcAsr, transcribe
from voicespec.frontend.duration import length_mask
from voicespec.frontend.text import CharTokenizer
from voicespec.train.common import TrainingRun, cosine_lr_factor, hardware
from voicespec.train.ctc_align import min_frames
from voicespec.train.configs import ENCODERS, AsrTrainConfig


# --- data ----------------------------------------------------------------------------------------

@dataclass
class Utterance:
    id: str
    text: str
    pcm: torch.Tensor  # float32 at the model's rate
    ids: list[int]


def load_utterances(data_dir: Path, sample_rate: int, split: str, tokenizer: CharTokenizer,
                    hop_length: int = 320) -> list[Utterance]:
    """Every utterance of a split with its normalized text, resampled, in memory; utterances
    too short for their text (CTC needs a frame per character) are left out."""
    manifest = data_dir / "manifest.jsonl"
    if not manifest.is_file():
        raise FileNotFoundError(f"{data_dir}: no manifest.jsonl (make one with `voicespec train data`)")
    out = []
    for line in manifest.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if rec.get("split", "train") != split:
            continue
        wav = data_dir / rec.get("wav", f"wav/{rec['id']}.wav")
        audio, sr = sf.read(str(wav), dtype="float32", always_2d=True)
        x = torch.from_numpy(audio.mean(axis=1))
        if sr != sample_rate:
            x = AF.resample(x, sr, sample_rate)
        ids = tokenizer.encode(rec["text"])
        if ids and -(-x.shape[0] // hop_length) >= min_frames(ids):
            out.append(Utterance(rec["id"], tokenizer.decode(ids), x, ids))
    if not out:
        raise ValueError(f"{data_dir}: no usable {split} utterances in the manifest")
    return out


def length_batches(lengths: Sequence[int], max_padded: int, rng: random.Random, jitter: float = 0.1) -> list[list[int]]:
    """One epoch of batches of indices: sorted by (jittered) length, grouped so that ``batch
    size x longest`` stays within ``max_padded`` (a longer single item gets its own batch), in
    random order."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i] * (1 + jitter * (2 * rng.random() - 1)))
    batches, cur, longest = [], [], 0
    for i in order:
        new_longest = max(longest, lengths[i])
        if cur and new_longest * (len(cur) + 1) > max_padded:
            batches.append(cur)
            cur, new_longest = [], lengths[i]
        cur.append(i)
        longest = new_longest
    if cur:
        batches.append(cur)
    rng.shuffle(batches)
    return batches


def _pad(utts: Sequence[Utterance]) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = torch.tensor([u.pcm.shape[0] for u in utts])
    out = torch.zeros(len(utts), int(lengths.max()))
    for i, u in enumerate(utts):
        out[i, : u.pcm.shape[0]] = u.pcm
    return out, lengths


# --- training ------------------------------------------------------------------------------------

@torch.no_grad()
def _feature_stats(model: CtcAsr, utts: Sequence[Utterance]) -> tuple[torch.Tensor, torch.Tensor]:
    feats = torch.cat([model.log_mel(u.pcm[None])[0] for u in utts], dim=1)
    return feats.mean(1), feats.std(1).clamp_min(1e-3)


def _augment(wave: torch.Tensor, lengths: torch.Tensor, config: AsrTrainConfig, rng: random.Random) -> torch.Tensor:
    wave = wave.clone()
    for i in range(wave.shape[0]):
        n = int(lengths[i])
        wave[i, :n] *= 10 ** (rng.uniform(*config.gain_db) / 20)
        if rng.random() < config.noise_prob:
            rms = wave[i, :n].pow(2).mean().sqrt()
            noise = torch.randn(n) * rms * 10 ** (-rng.uniform(20, 40) / 20)
            wave[i, :n] += noise
    return wave


def _spec_augment(feats: torch.Tensor, frame_lengths: torch.Tensor, config: AsrTrainConfig) -> torch.Tensor:
    for _ in range(config.freq_masks):
        feats = T.FrequencyMasking(config.freq_mask_param, iid_masks=True)(feats)
    for _ in range(config.time_masks):
        feats = T.TimeMasking(config.time_mask_param, iid_masks=True)(feats)
    return feats * length_mask(frame_lengths, feats.shape[-1])[:, None, :]


@torch.no_grad()
def evaluate(model: CtcAsr, utts: Sequence[Utterance], examples: int = 0) -> dict[str, Any]:
    """Held-out greedy CER/WER (pooled over utterances); ``examples``: (ref, hyp) pairs to include."""
    pairs = [(u.text, transcribe(model, u.pcm, model.config.sample_rate)) for u in utts]
    out: dict[str, Any] = corpus_error_rates(pairs)
    if examples:
        out["examples"] = [{"ref": r, "hyp": h} for r, h in pairs[:examples]]
    return out



def train_asr(data_dir: Path, out_dir: Path, config: AsrTrainConfig = AsrTrainConfig(),
              model_config: AsrConfig = AsrConfig(), log=print) -> Path:
    """Train (or resume) until ``config.minutes`` of total training time; export; return the
    exported folder ``out_dir/asr``. On resume the checkpoint's model config wins."""
    data_dir, out_dir = Path(data_dir), Path(out_dir)
    run = TrainingRun(out_dir, config.seed, config.threads, config.checkpoint_every_s, log)
    if run.state is not None:
        model_config = AsrConfig.from_dict(run.state["asr_config"])
    model = CtcAsr(replace(model_config, extra={}))
    tokenizer = model.tokenizer
    train = load_utterances(data_dir, model_config.sample_rate, "train", tokenizer, model_config.hop_length)
    heldout = load_utterances(data_dir, model_config.sample_rate, "heldout", tokenizer,
                              model_config.hop_length)[: config.eval_utterances]
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    run.attach(model, opt, lambda: {"asr_config": model.config.to_dict(), "train_config": asdict(config)})
    if run.state is None:
        sample = run.rng.sample(train, min(len(train), config.stats_utterances))
        mean, std = _feature_stats(model, sample)
        model.feat_mean.copy_(mean)
        model.feat_std.copy_(std)
        log(f"new run: {model.n_params() / 1e6:.2f} M parameters, {len(train)} train / {len(heldout)} held-out "
            f"utterances ({sum(u.pcm.shape[0] for u in train) / model_config.sample_rate / 60:.1f} min of train audio)")
    max_padded = int(config.batch_seconds * model_config.sample_rate)
    batches: list[list[int]] = []
    model.train()
    while run.trained_s < config.minutes * 60 and not (config.max_steps and run.step >= config.max_steps):
        t0 = time.perf_counter()
        if not batches:
            batches = length_batches([u.pcm.shape[0] for u in train], max_padded, run.rng)
        utts = [train[i] for i in batches.pop()]
        wave, lengths = _pad(utts)
        wave = _augment(wave, lengths, config, run.rng)
        feats, frame_lengths = model.features(wave, lengths)
        feats = _spec_augment(feats, frame_lengths, config)
        log_probs = model(feats, frame_lengths)
        targets = torch.tensor([k for u in utts for k in u.ids])
        target_lengths = torch.tensor([len(u.ids) for u in utts])
        loss = F.ctc_loss(log_probs.transpose(0, 1), targets, frame_lengths, target_lengths, blank=BLANK,
                          zero_infinity=True)
        lr = config.lr * cosine_lr_factor(run.step, run.trained_s, config.warmup_steps, config.minutes,
                                          config.final_lr_frac, config.max_steps)
        grad = run.update(loss, lr, t0)
        if run.step % config.log_every_steps == 0:
            run.record({"step": run.step, "trained_min": round(run.trained_s / 60, 2), "loss": loss.item(),
                        "grad_norm": grad, "lr": lr, "batch": len(utts)})
        if run.step % config.reload_every_steps == 0:  # the corpus may still be growing
            train = load_utterances(data_dir, model_config.sample_rate, "train", tokenizer, model_config.hop_length)
            batches = []
        if run.step % config.eval_every_steps == 0:
            run.record({"step": run.step, "trained_min": round(run.trained_s / 60, 2),
                        "heldout": evaluate(model, heldout, 2)})
            model.train()
        run.maybe_save()
    run.save()
    return export(out_dir, data_dir, heldout)


def export(out_dir: Path, data_dir: Path | None = None, heldout: Sequence[Utterance] | None = None) -> Path:
    """Write ``out_dir/asr`` (config.json + model.safetensors) from the checkpoint, with its
    provenance and held-out CER/WER in ``config.extra``."""
    state = torch.load(Path(out_dir) / "checkpoint.pt", map_location="cpu", weights_only=False)
    config = AsrConfig.from_dict(state["asr_config"])
    model = CtcAsr(config)
    model.load_state_dict(state["model"])
    model.eval()
    metrics = evaluate(model, heldout, 3) if heldout else {}
    extra = {
        "training": {"steps": state["step"], "trained_minutes": round(state["trained_s"] / 60, 1),
                     "hardware": hardware(),
                     "data": str(data_dir) if data_dir else None, "recipe": "voicespec train asr",
                     "train_config": state["train_config"], "parameters": model.n_params()},
        "heldout_metrics": metrics,
        "blank": "class 0 is the CTC blank (CharTokenizer's padding id); class i is alphabet[i - 1]",
    }
    model.config = replace(config, extra=extra)
    model.save(Path(out_dir) / "asr")
    return Path(out_dir) / "asr"


# --- command line --------------------------------------------------------------------------------

def run_asr(args: argparse.Namespace) -> int:
    config = AsrTrainConfig(minutes=args.minutes, max_steps=args.max_steps, batch_seconds=args.batch_seconds,
                            lr=args.lr, eval_every_steps=args.eval_every, seed=args.seed, threads=args.threads)
    folder = train_asr(Path(args.data), Path(args.out), config, AsrConfig(**ENCODERS[args.encoder]))
    metrics = CtcAsr.from_folder(folder).config.extra.get("heldout_metrics", {})
    print(f"exported {folder}" + (f" (held-out CER {metrics['cer']:.3f})" if "cer" in metrics else ""))
    return 0
