"""A fine stage that completes a verify pass's frames at once: distilled from the shipped one.

The shipped fine stage reads the previous frame's codes, so the frames one verify pass accepted
are completed one after another, each reading the MLPs' weights again: at batch 1 on a CPU most of
its cost, and the part of a step speculation cannot amortize (README, "Where a step's time goes").
A stage that reads only the backbone's state and the frame's coarse code (``fine_reads_prev:
false``) completes them as one batch. This recipe makes one without the teacher corpus: the
backbone stays frozen (its coarse codes do not change), the target samples sentences of the
project's own corpus grammar with the voice's settings, and the new stage starts from the old
one's weights (its previous-frame table dropped) and learns the old stage's distribution
(KL to the old logits, which did see the previous frame), teacher-forced on the sampled frames.
The result is a copy of the voice folder with the new stage in its target.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

import torch
from torch.nn import functional as F

from voicespec.engine.layout import Prompt
from voicespec.lm.codec_lm import CodecLM, CodecLMConfig, FineStage, init_weights, step_slots
from voicespec.pipeline.voice import Voice
from voicespec.train.common import TrainingRun, cosine_lr_factor, hardware, save_atomic
from voicespec.train.corpus import build_corpus
from voicespec.train.speak import speak

SAMPLES = "fine_samples.pt"
FINE_STAGE_FILE = "FINE_STAGE.json"  # beside the target: the recipe of the stage swapped in


def corpus_texts(n: int, seed: int) -> list[str]:
    """``n`` sentences of the project's corpus grammar (:mod:`voicespec.train.corpus`), seed ``seed``."""
    return [s.text for s in build_corpus(n, seed)]


@torch.inference_mode()
def sample_frames(voice: Voice, texts: list[str], out_dir: Path, batch: int = 48, seed: int = 0,
                  log: Callable[[str], Any] = print) -> dict[str, torch.Tensor]:
    """What the fine stage sees and does when the target speaks ``texts`` (plain decoding, the
    voice's sampling, seed ``seed + i``): per step the hidden state that predicted its coarse code
    (``h [N, D]``), its codes by slot (``codes [N, G K]``, :func:`~voicespec.lm.codec_lm.step_slots`),
    the previous frame's (``prev [N, K]``) and the index of its sentence (``utt [N]``); a sentence's
    last step short of G frames is left out. Saved to ``OUT/fine_samples.pt`` and reused."""
    path = out_dir / SAMPLES
    if path.exists():
        return torch.load(path, weights_only=False)
    config = voice.target.model.config
    K, C, G = config.n_codebooks, config.codebook_size, config.frames_per_step
    items = [voice.prompt(ids) for text in texts for _, ids in voice.frontend.sentences(text)]
    hs, codes, prevs, utts, t0 = [], [], [], [], time.perf_counter()
    for first in range(0, len(items), batch):
        prompts = items[first: first + batch]
        for i, (frames, h) in enumerate(spoken_frames(voice, prompts, [seed + first + i for i in range(len(prompts))])):
            n = frames.shape[1] // G  # whole steps
            if not n:
                continue
            slots = step_slots(frames.T[: n * G], G)  # [n, G K]
            hs.append(h[:n])
            codes.append(slots)
            prevs.append(torch.cat([torch.full((1, K), C), slots[:-1, -K:]]))
            utts.append(torch.full((n,), first + i))
        log(f"sampled {min(first + batch, len(items))}/{len(items)} sentences, {sum(c.shape[0] for c in codes)} steps "
            f"({time.perf_counter() - t0:.0f} s)")
    data = {"h": torch.cat(hs), "codes": torch.cat(codes), "prev": torch.cat(prevs), "utt": torch.cat(utts)}
    save_atomic(data, path)
    return data


@torch.inference_mode()
def spoken_frames(voice: Voice, prompts: list[Prompt], seeds: list[int]) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
    """Each prompt spoken by the target (:func:`~voicespec.train.speak.speak`): its frames ``[K, n]``
    and, teacher-forced, the hidden states that predicted its steps' coarse codes ``[ceil(n/G), D]``
    (the fine stage's input; None for no frames)."""
    out: list[tuple[torch.Tensor, torch.Tensor | None]] = []
    for p, frames in zip(prompts, speak(voice, prompts, seeds)):
        if not frames.shape[1]:
            out.append((frames, None))
            continue
        session = voice.target.start(p)  # teacher-forced: row j of the pass predicted step j's coarse code
        coarse = voice.target.layout.steps_for_frames(frames, with_eos=False)  # [ceil(n/G), 1]
        session.forward(torch.cat([p.steps[-1:], coarse[:-1]]))
        out.append((frames, session.hidden.float().cpu()))
        session.close()
    return out


def batched_stage(old: FineStage, width: int | None = None) -> FineStage:
    """A fine stage that does not read the previous frame, starting from ``old``'s other weights;
    of another ``width`` (a cheaper stage: its MLPs are most of a grouped step's fine cost), from
    scratch (as :class:`~voicespec.lm.codec_lm.CodecLM` initialises one)."""
    width = width or old.inp.out_features
    new = FineStage(old.inp.in_features, old.K, old.C, width, reads_prev=False, frames_per_step=old.G)
    if width == old.inp.out_features:
        new.load_state_dict({k: v for k, v in old.state_dict().items() if not k.startswith("prev.")})
        return new
    init_weights(new.modules(), CodecLMConfig.initializer_range)
    return new


def distill_loss(new: FineStage, old: FineStage, h: torch.Tensor, codes: torch.Tensor, prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """KL(old ‖ new) per slot 1..S-1 (codebooks 1..K-1 of one frame a step; mean over steps) and
    the new stage's cross-entropy on the sampled codes."""
    with torch.no_grad():
        teacher = old.logits(h, codes, prev).log_softmax(-1)  # [N, S-1, C]
    student = new.logits(h, codes, prev).log_softmax(-1)
    kl = (teacher.exp() * (teacher - student)).sum(-1).mean(0)
    ce = F.nll_loss(student.permute(0, 2, 1), codes[:, 1:], reduction="none").mean(0)
    return kl, ce


def train_fine(voice_dir: Path, out_dir: Path, utterances: int = 600, corpus_seed: int = 7, batch: int = 48,
               minutes: float = 15.0, batch_frames: int = 2048, lr: float = 1e-3, seed: int = 0, threads: int = 0,
               max_steps: int = 0, eval_every: int = 50, command: str = "", log: Callable[[str], Any] = print,
               width: int | None = None) -> Path:
    """Sample, distil, and write ``OUT/voice``: ``voice_dir`` with the new fine stage in its target."""
    out_dir.mkdir(parents=True, exist_ok=True)
    voice = Voice.load(voice_dir)
    model: CodecLM = voice.target.model
    if model.fine is None or not model.fine.reads_prev:
        raise ValueError(f"{voice_dir}: the target has no fine stage that reads the previous frame")
    data = sample_frames(voice, corpus_texts(utterances, corpus_seed), out_dir, batch, seed, log)
    heldout = data["utt"] % 10 == 0  # every tenth sentence: the held-out frames
    train_idx, eval_idx = (~heldout).nonzero()[:, 0], heldout.nonzero()[:, 0]
    old = copy.deepcopy(model.fine).eval().requires_grad_(False)
    new = batched_stage(old, width).train()
    run = TrainingRun(out_dir / "run", seed, threads, log=log)
    opt = torch.optim.AdamW(new.parameters(), lr=lr, weight_decay=0.01)
    run.attach(new, opt, lambda: {})

    def evaluate() -> dict[str, Any]:
        new.eval()
        with torch.no_grad():
            i = eval_idx
            kl, ce = distill_loss(new, old, data["h"][i], data["codes"][i], data["prev"][i])
            with_prev = F.cross_entropy(old.logits(data["h"][i], data["codes"][i], data["prev"][i]).permute(0, 2, 1),
                                        data["codes"][i][:, 1:], reduction="none").mean(0)
        new.train()
        return {"kl": [round(float(x), 4) for x in kl], "ce": [round(float(x), 4) for x in ce],
                "ce_old": [round(float(x), 4) for x in with_prev]}

    log(f"{len(train_idx)} training steps, {len(eval_idx)} held out; start {evaluate()}")
    while run.trained_s < minutes * 60 and not (max_steps and run.step >= max_steps):
        started = time.perf_counter()
        i = train_idx[torch.randint(len(train_idx), (batch_frames,))]
        kl, _ = distill_loss(new, old, data["h"][i], data["codes"][i], data["prev"][i])
        factor = cosine_lr_factor(run.step, run.trained_s, 20, minutes, 0.05, max_steps)
        loss = kl.sum()
        grad = run.update(loss, lr * factor, started)
        if run.step % eval_every == 0:
            run.record({"step": run.step, "minutes": round(run.trained_s / 60, 2), "kl": round(float(loss.detach()), 4),
                        "grad": round(grad, 3), "eval": evaluate()})
        run.maybe_save()
    run.save()
    final = evaluate()
    log(f"done: {final}")
    return write_voice(voice_dir, out_dir / "voice", new.eval(), {
        "recipe": "voicespec train fine", "command": command, "utterances": utterances, "corpus_seed": corpus_seed,
        "frames": int(len(train_idx)) * model.config.frames_per_step, "steps": run.step, "trained_minutes": round(run.trained_s / 60, 1),
        "hardware": hardware(), "heldout": final})


def write_voice(voice_dir: Path, dest: Path, stage: FineStage, info: dict[str, Any]) -> Path:
    """A copy of ``voice_dir`` at ``dest`` whose target's fine stage is ``stage`` (``fine_reads_prev: false``)."""
    if dest.exists():
        shutil.rmtree(dest)
    Voice.copy_folder(voice_dir, dest, ignore=shutil.ignore_patterns("target"))
    model = CodecLM.from_folder(voice_dir / "target")
    model.config.fine_reads_prev = False
    model.config.fine_width = stage.inp.out_features
    model.fine = stage
    model.config.voicespec_info = {**getattr(model.config, "voicespec_info", {}), "fine_stage": info}
    model.save(dest / "target")
    card = voice_dir / "target" / "MODEL_CARD.md"
    if card.exists():
        shutil.copy(card, dest / "target" / "MODEL_CARD.md")
    (dest / "target" / FINE_STAGE_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return dest


def run_fine(args: argparse.Namespace) -> int:
    dest = train_fine(Path(args.voice), Path(args.out), args.utterances, args.corpus_seed, args.batch, args.minutes,
                      args.batch_frames, args.lr, args.seed, args.threads, args.max_steps, args.eval_every,
                      args.command or "", width=args.width)
    print(f"wrote {dest}")
    return 0
