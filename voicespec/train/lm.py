"""The default voice's codec LM and its distilled draft model: ``voicespec train lm`` / ``train draft``.

Preparation (once per run folder, cached in ``OUT/prepared.pt``): every teacher utterance becomes
its tokenizer ids, its codes ``[K, T]`` from the shipped codec, and the frames spoken for each
character (CTC forced alignment with the in-repo recognizer, 50 Hz = the codec's frame rate, so the
durations sum to ``T``). ``OUT/durations.jsonl`` holds the (ids, durations) items that
``voicespec train duration`` learns from.

Target: a :class:`~voicespec.lm.codec_lm.CodecLM` in the delay layout (one step per frame) with a
frame-aligned text track, trained by teacher forcing (cross-entropy on all K heads, embedding
dropout, AdamW, cosine over a time budget). Held-out metrics include the loss with *another*
utterance's track: if the model ignored the text the two would be equal.

Draft: the target's first layers (embeddings, track, heads and final norm included), distilled on
the target's full output distributions, ``KL(p || q)``: in sampling mode a drafted token is
accepted with probability ``1 - TV(p, q)``, so matching distributions is what pays.

Both follow the other recipes: ``OUT/checkpoint.pt`` rewritten atomically, ``--minutes`` a budget
on total training time across resumes, ``OUT/metrics.jsonl``, export as an HF-style folder with
provenance in the config (``voicespec_info``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

import torch
from torch import nn
from torch.nn import functional as F

from voicespec.codec.model import Codec
from voicespec.lm.codec_lm import END_ROW, CodecLM, CodecLMConfig, slot_mask, step_slots, truncated_copy
from voicespec.frontend.duration import frame_track
from voicespec.engine.layout import CoarseFirstLayout, DelayLayout
from voicespec.eval.recognizer import load_asr
from voicespec.train.asr import length_batches, load_utterances
from voicespec.train.common import TrainingRun, cosine_lr_factor, hardware, pick_device, save_atomic
from voicespec.train.ctc_align import align
from voicespec.train.configs import LMTrainConfig

INFO_KEY = "voicespec_info"


@dataclass
class Example:
    id: str
    ids: list[int]
    codes: torch.Tensor  # [K, T] int16
    durations: list[int]  # frames per id, sum T
    split: str


def codec_key(codec: Codec) -> str:
    """A fingerprint of the codec's weights: cached codes hold for that codec only."""
    h = hashlib.sha1()
    for name, t in sorted(codec.model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def prepare(data_dir: Path, codec: Codec, asr_dir: Path | None, out_dir: Path, log=print) -> list[Example]:
    """Encode and align the corpus once; cached (a rerun with a grown corpus adds only new ids).
    A cache made with another codec keeps its alignments (they depend on the audio and the frame
    rate, not on the codes) and re-encodes the codes: retraining the LM on a new codec skips the
    forced alignment. Without a recognizer (``asr_dir`` None) the units are phonemes and their
    durations come from the teacher's own alignment (:func:`prepare_phonemes`)."""
    if asr_dir is None:
        return prepare_phonemes(data_dir, codec, out_dir, log)
    cache = out_dir / "prepared.pt"
    done: dict[str, Example] = {}
    key, same_codec = codec_key(codec), False
    if cache.is_file():
        cached = torch.load(cache, weights_only=False)
        if "tokenizer" in cached:
            raise ValueError(f"{cache} holds phoneme units; use another --out for a character model")
        done = {e.id: e for e in (Example(**d) for d in cached["examples"])}
        same_codec = cached.get("codec") == key
    asr = load_asr(asr_dir)
    if asr.config.sample_rate != codec.sample_rate or asr.config.hop_length != codec.hop_length:
        raise ValueError(f"the recognizer's frames ({asr.config.sample_rate} Hz / {asr.config.hop_length}) must be "
                         f"the codec's ({codec.sample_rate} Hz / {codec.hop_length})")
    out: list[Example] = []
    t0 = time.perf_counter()
    for split in ("train", "heldout"):
        for u in load_utterances(data_dir, codec.sample_rate, split, asr.tokenizer, codec.hop_length):
            if u.id not in done or not same_codec:
                codes = codec.encode(u.pcm)
                durations = done[u.id].durations if u.id in done else align(asr, u.pcm, codec.sample_rate, u.text)
                if sum(durations) != codes.shape[1]:
                    raise ValueError(f"{u.id}: alignment covers {sum(durations)} frames, the codec gives {codes.shape[1]}")
                done[u.id] = Example(u.id, u.ids, codes.to(torch.int16), durations, split)
            out.append(done[u.id])
    save_atomic({"examples": [asdict(e) for e in out], "asr": str(asr_dir), "codec": key}, cache)
    write_durations(out_dir, out)
    log(f"prepared {len(out)} utterances ({sum(e.codes.shape[1] for e in out)} frames) in {time.perf_counter() - t0:.0f} s")
    return out


def write_durations(out_dir: Path, examples: Sequence[Example]) -> None:
    """``OUT/durations.jsonl``: the (ids, durations) items ``voicespec train duration`` learns from."""
    with (out_dir / "durations.jsonl").open("w") as f:
        for e in examples:
            f.write(json.dumps({"id": e.id, "ids": e.ids, "durations": e.durations, "split": e.split}) + "\n")


def prepare_phonemes(data_dir: Path, codec: Codec, out_dir: Path, log=print) -> list[Example]:
    """Phoneme ids (gruut, :mod:`voicespec.frontend.phonemes`) and frames per phoneme transferred from
    Piper's per-symbol alignment (:mod:`voicespec.train.phone_align`); cached like :func:`prepare`.
    Utterances whose alignment agrees on fewer than ``MIN_AGREEMENT`` of the characters are
    left out (and counted)."""
    import soundfile as sf

    from voicespec.frontend.phonemes import PHONEMIZER_VERSION, PhonemeTokenizer, phonemize
    from voicespec.train.data import read_manifest, resample
    from voicespec.train.phone_align import to_frames, transfer

    cache = out_dir / "prepared.pt"
    tokenizer = PhonemeTokenizer()
    key, done, agreement, codes_of = codec_key(codec), {}, {}, {}
    if cache.is_file():
        cached = torch.load(cache, weights_only=False)
        if cached.get("codec") == key:
            examples = [Example(**d) for d in cached["examples"]]
            if cached.get("tokenizer") == tokenizer.to_dict() and cached.get("phonemizer") == PHONEMIZER_VERSION:
                done = {e.id: e for e in examples}
                agreement = cached.get("agreement", {})
            else:  # other units: keep the codes, redo the (cheap) phonemes and durations
                codes_of = {e.id: e.codes for e in examples}
    entries, _ = read_manifest(Path(data_dir) / "manifest.jsonl")
    if not entries:
        raise FileNotFoundError(f"{data_dir}: no utterances in manifest.jsonl (make them with `voicespec train data`)")
    out, dropped, t0 = [], 0, time.perf_counter()
    for rec in entries:
        if rec["id"] not in done:
            al = rec.get("alignment")
            if al is None:
                raise ValueError(f"{rec['id']}: the corpus has no teacher alignment (make it with onnx installed)")
            units = [u for u in phonemize(rec["text"]) if tokenizer.ids_of([u])]  # one id per timed unit
            tr = transfer(units, al["phonemes"], al["samples"])
            agreement[rec["id"]] = round(tr.agreement, 4)
            if tr.agreement < MIN_AGREEMENT:
                dropped += 1
                continue
            codes = codes_of.get(rec["id"])
            if codes is None:
                audio, sr = sf.read(str(Path(data_dir) / rec["wav"]), dtype="float32")
                codes = codec.encode(resample(audio, sr, codec.sample_rate))
            durations = to_frames(tr.samples, al["sample_rate"], codec.sample_rate / codec.hop_length, codes.shape[1])
            done[rec["id"]] = Example(rec["id"], tokenizer.ids_of(units), codes.to(torch.int16), durations, rec["split"])
            if len(done) % 500 == 0:  # a checkpoint: an interrupted preparation resumes here
                save_atomic({"examples": [asdict(e) for e in done.values()], "codec": key,
                             "tokenizer": tokenizer.to_dict(), "phonemizer": PHONEMIZER_VERSION,
                             "agreement": agreement}, cache)
                log(f"prepared {len(done)} utterances ({time.perf_counter() - t0:.0f} s)")
        if rec["id"] in done:
            out.append(done[rec["id"]])
    save_atomic({"examples": [asdict(e) for e in out], "codec": key, "tokenizer": tokenizer.to_dict(),
                 "phonemizer": PHONEMIZER_VERSION, "agreement": agreement}, cache)
    write_durations(out_dir, out)
    values = list(agreement.values())
    log(f"prepared {len(out)} utterances ({sum(e.codes.shape[1] for e in out)} frames) in "
        f"{time.perf_counter() - t0:.0f} s; alignment agreement mean {sum(values) / len(values):.3f}, "
        f"{dropped} left out below {MIN_AGREEMENT}")
    return out


MIN_AGREEMENT = 0.75


@dataclass
class LMSequence:
    """One utterance as the LM sees it in training: text prefix, input steps, targets, track."""

    text: torch.Tensor  # [S]
    inputs: torch.Tensor  # [L, G]: BOS, then every target step but the last
    targets: torch.Tensor  # [L, G]
    track: torch.Tensor  # [L, 4]: each step's first frame's row, END past the last
    frames: torch.Tensor  # [T, K]: the codes, for a coarse-first model's fine stage (T / G < L)

    def to(self, device: torch.device) -> LMSequence:
        return LMSequence(self.text.to(device), self.inputs.to(device), self.targets.to(device), self.track.to(device),
                          self.frames.to(device))


def to_sequence(ex: Example, layout: DelayLayout | CoarseFirstLayout, track_positions: int) -> LMSequence:
    targets = layout.steps_for_frames(ex.codes.long())
    bos = torch.full((1, layout.groups), layout.bos_id)
    track = torch.tensor(END_ROW).repeat(targets.shape[0], 1)
    rows = frame_track(ex.ids, ex.durations, track_positions)[:: getattr(layout, "frames_per_step", 1)]
    track[: rows.shape[0]] = rows
    return LMSequence(torch.tensor(ex.ids), torch.cat([bos, targets[:-1]]), targets, track, ex.codes.long().T)


@dataclass
class Outputs:
    logits: torch.Tensor  # [L, G, V] at every step of one sequence
    hidden: torch.Tensor  # [L, D]: the final hidden states that produced them


def batch_outputs(model: CodecLM, seqs: Sequence[LMSequence], dropout: float = 0.0) -> list[Outputs]:
    """Logits and hidden states at every step of each sequence, in one right-padded pass (causal
    attention never reads the padding, so no attention mask is needed)."""
    embs = [model.embed(s.text[None], s.inputs[None], s.track[None])[0] for s in seqs]
    x = F.dropout(nn.utils.rnn.pad_sequence(embs, batch_first=True), dropout, model.training)
    h = model.backbone(x)
    G, V = model.n_codebooks, model.head_vocab
    rows = [h[i, len(s.text) : len(s.text) + len(s.inputs)] for i, s in enumerate(seqs)]
    return [Outputs(model.heads(r).view(-1, G, V), r) for r in rows]


def batch_logits(model: CodecLM, seqs: Sequence[LMSequence], dropout: float = 0.0) -> list[torch.Tensor]:
    return [o.logits for o in batch_outputs(model, seqs, dropout)]


def fine_ce(model: CodecLM, outputs: Sequence[Outputs], seqs: Sequence[LMSequence]) -> torch.Tensor:
    """Cross-entropy ``[S-1]`` of the fine stage on its slots (codebooks 1..K-1 of a step's first
    frame, then the codes of its next frames), teacher-forced: step j reads the hidden state that
    predicted its coarse code, its codes, and the previous step's last frame. A last step short of
    G frames counts only its real slots."""
    G, K = model.config.frames_per_step, model.config.n_codebooks
    slots = [step_slots(s.frames, G) for s in seqs]  # [n_b, S] each
    h = torch.cat([o.hidden[: c.shape[0]] for o, c in zip(outputs, slots)])
    none = torch.full((1, K), model.config.codebook_size, device=h.device)
    prev = torch.cat([torch.cat([none, c[:-1, -K:]]) for c in slots])
    codes = torch.cat(slots)
    logits = model.fine.logits(h, codes, prev)  # [N, S-1, C]
    ce = F.cross_entropy(logits.permute(0, 2, 1), codes[:, 1:], reduction="none")  # [N, S-1]
    real = torch.cat([slot_mask(s.frames.shape[0], G, K) for s in seqs]).to(h.device)[:, 1:].float()
    return (ce * real).sum(0) / real.sum(0).clamp_min(1)


def ce_per_codebook(outputs: Sequence[Outputs], seqs: Sequence[LMSequence], model: CodecLM) -> torch.Tensor:
    """Cross-entropy per codebook ``[K]``; for a coarse-first model codebook 0 from the backbone
    and 1..K-1 from the fine stage, so both layouts report the same quantity: the sum is the
    negative log-likelihood of a frame (per step, EOS included). Grouped (G frames a step): the
    backbone's, then one per fine slot ``[G K]``."""
    lg = torch.cat([o.logits for o in outputs])
    tg = torch.cat([s.targets for s in seqs])
    per_step = F.cross_entropy(lg.permute(0, 2, 1), tg, reduction="none").mean(0)  # [G]
    if model.fine is None:
        return per_step
    return torch.cat([per_step, fine_ce(model, outputs, seqs)])


def kl_per_codebook(draft: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """``KL(p_target || q_draft)`` per codebook, averaged over steps."""
    q = F.log_softmax(torch.cat(list(draft)), -1)
    p = F.log_softmax(torch.cat(list(target)), -1)
    return (p.exp() * (p - q)).sum(-1).mean(0)


def tv_per_codebook(draft: Sequence[torch.Tensor], target: Sequence[torch.Tensor]) -> torch.Tensor:
    """Total variation per codebook: ``1 - TV`` is the sampling-mode acceptance of one token."""
    q = F.softmax(torch.cat(list(draft)), -1)
    p = F.softmax(torch.cat(list(target)), -1)
    return 0.5 * (p - q).abs().sum(-1).mean(0)


def wrong_text(seq: LMSequence, other: LMSequence) -> LMSequence:
    """``seq``'s audio with ``other``'s text and track (cycled to length): a text-blind model
    would score it as well as the right text."""
    idx = torch.arange(seq.track.shape[0]) % other.track.shape[0]
    return LMSequence(other.text, seq.inputs, seq.targets, other.track[idx], seq.frames)


# --- configuration -------------------------------------------------------------------------------

def default_target_config(codec: Codec, text_vocab: int, **kw: Any) -> CodecLMConfig:
    """6 x 256 Llama, coarse-first with a fine stage (or MusicGen delays), 16 track positions:
    ~7 M parameters, faster than real time on 2 CPU cores with speculation off."""
    base = dict(text_vocab_size=text_vocab, n_codebooks=codec.n_codebooks, codebook_size=codec.codebook_size,
                delays=list(range(codec.n_codebooks)), track_positions=16, coarse_first=True, fine_width=256,
                hidden_size=256, num_hidden_layers=6,
                num_attention_heads=4, num_key_value_heads=4, intermediate_size=768, max_position_embeddings=4096)
    base.update(kw)
    return CodecLMConfig(**base)


# --- training ------------------------------------------------------------------------------------

class _Run(TrainingRun):
    """The time-budgeted loop shared by the target and the draft recipe."""

    def __init__(self, out_dir: Path, model: CodecLM, config: LMTrainConfig, kind: str, log=print) -> None:
        super().__init__(out_dir, config.seed, config.threads, config.checkpoint_every_s, log, config.device)
        self.model, self.config, self.kind = model.to(self.device), config, kind
        opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
        self.attach(model, opt, lambda: {"model_config": model.config.to_dict(), "train_config": asdict(config)})

    def loop(self, train: Sequence[LMSequence], loss_fn, evaluate) -> None:
        """``loss_fn(batch) -> (loss, per-codebook tensor)``; ``evaluate() -> dict``."""
        c = self.config
        batches: list[list[int]] = []
        self.model.train()
        while self.trained_s < c.minutes * 60 and not (c.max_steps and self.step >= c.max_steps):
            t0 = time.perf_counter()
            if not batches:
                batches = length_batches([s.inputs.shape[0] + s.text.shape[0] for s in train], c.batch_steps, self.rng)
            loss, per_cb = loss_fn([train[i] for i in batches.pop()])
            lr = c.lr * cosine_lr_factor(self.step, self.trained_s, c.warmup_steps, c.minutes, c.final_lr_frac,
                                         c.max_steps)
            grad = self.update(loss, lr, t0)
            if self.step % c.log_every_steps == 0:
                self.record({"step": self.step, "trained_min": round(self.trained_s / 60, 2), "loss": loss.item(),
                             "per_codebook": [round(x, 3) for x in per_cb.tolist()], "grad_norm": grad, "lr": lr})
            if self.step % c.eval_every_steps == 0:
                self.model.eval()
                self.record({"step": self.step, "trained_min": round(self.trained_s / 60, 2), "heldout": evaluate()})
                self.model.train()
            self.maybe_save()
        self.save()
        self.model.eval()

    def export(self, folder: str, info: dict[str, Any]) -> Path:
        path = self.out_dir / folder
        setattr(self.model.config, INFO_KEY, {
            "recipe": f"voicespec train {self.kind}", "steps": self.step, "trained_minutes": round(self.trained_s / 60, 1),
            "hardware": hardware(self.device), "train_config": asdict(self.config), "parameters": self.model.n_params(),
            **info,
        })
        self.model.save(path)
        return path


def _split(examples: Sequence[Example], layout: DelayLayout, positions: int,
           device: torch.device) -> tuple[list[LMSequence], list[LMSequence]]:
    train = [to_sequence(e, layout, positions).to(device) for e in examples if e.split == "train"]
    heldout = [to_sequence(e, layout, positions).to(device) for e in examples if e.split == "heldout"]
    if not train or not heldout:
        raise ValueError("need both train and held-out utterances")
    return train, heldout


@torch.no_grad()
def heldout_ce(model: CodecLM, heldout: Sequence[LMSequence], chunk: int = 64) -> dict[str, Any]:
    def ce(seqs: Sequence[LMSequence]) -> torch.Tensor:
        """Means over the whole set: steps weigh the backbone's codebooks, frames the fine stage's."""
        total, weight = 0.0, 0.0
        for i in range(0, len(seqs), chunk):
            part = seqs[i: i + chunk]
            w = slot_counts(model, part)
            total, weight = total + ce_per_codebook(batch_outputs(model, part), part, model).cpu() * w, weight + w
        return total / weight

    right = ce(heldout)
    shuffled = [wrong_text(s, heldout[(i + 1) % len(heldout)]) for i, s in enumerate(heldout)]
    wrong = ce(shuffled)
    # Nats per frame: a step's loss spread over its G frames, each fine slot's over the frames.
    share = slot_counts(model, heldout)
    share[: model.n_codebooks] = 1 / model.config.frames_per_step
    share[model.n_codebooks:] /= sum(s.frames.shape[0] for s in heldout)
    return {"ce": round(right.mean().item(), 4), "per_codebook": [round(x, 3) for x in right.tolist()],
            "frame_nll": round((right * share).sum().item(), 4),
            "ce_wrong_text": round(wrong.mean().item(), 4),
            "text_gain_nats": round((wrong - right).mean().item(), 4)}


def slot_counts(model: CodecLM, seqs: Sequence[LMSequence]) -> torch.Tensor:
    """How many targets each column of :func:`ce_per_codebook` averaged over: steps for the
    backbone's, real slots for each of the fine stage's."""
    steps = float(sum(s.targets.shape[0] for s in seqs))
    if model.fine is None:
        return torch.full((model.n_codebooks,), steps)
    G, K = model.config.frames_per_step, model.config.n_codebooks
    slots = sum(slot_mask(s.frames.shape[0], G, K).sum(0) for s in seqs)[1:].float()
    return torch.cat([torch.tensor([steps]), slots])


def text_vocab(asr_dir: Path | None) -> int:
    """The LM's text vocabulary: the recognizer's characters, or the phoneme units without one."""
    if asr_dir is None:
        from voicespec.frontend.phonemes import PhonemeTokenizer

        return PhonemeTokenizer().vocab_size
    return load_asr(asr_dir).tokenizer.vocab_size


def train_target(data_dir: Path, codec_dir: Path, asr_dir: Path | None, out_dir: Path,
                 config: LMTrainConfig = LMTrainConfig(), model_config: CodecLMConfig | None = None, log=print) -> Path:
    """Prepare (cached), train or resume the target until the budget is spent, export ``OUT/target``.
    ``asr_dir`` None: phoneme units with the teacher's durations (see :func:`prepare`)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    codec = Codec.from_folder(codec_dir, pick_device(config.device))
    examples = prepare(Path(data_dir), codec, asr_dir and Path(asr_dir), out_dir, log)
    if (out_dir / "checkpoint.pt").is_file():
        model_config = CodecLMConfig.from_dict(torch.load(out_dir / "checkpoint.pt", map_location="cpu", weights_only=False)["model_config"])
    elif model_config is None:
        model_config = default_target_config(codec, text_vocab(asr_dir))
    model = CodecLM(model_config)
    run = _Run(out_dir, model, config, "lm", log)
    train, heldout = _split(examples, model_config.layout, model_config.track_positions, run.device)
    if run.step == 0:
        log(f"new target: {model.n_params() / 1e6:.2f} M parameters, {len(train)} train / {len(heldout)} "
            f"held-out utterances ({sum(s.frames.shape[0] for s in train)} train frames, "
            f"{sum(s.inputs.shape[0] for s in train)} steps with BOS)")

    def loss_fn(batch: Sequence[LMSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        per_cb = ce_per_codebook(batch_outputs(model, batch, config.dropout), batch, model)
        return per_cb.mean(), per_cb.detach()

    run.loop(train, loss_fn, lambda: heldout_ce(model, heldout))
    return run.export("target", {"data": str(data_dir), "codec": str(codec_dir),
                                 "units": "characters (CTC forced alignment)" if asr_dir else "phonemes (gruut; Piper's alignment)",
                                 "asr": asr_dir and str(asr_dir),
                                 "heldout_metrics": heldout_ce(model, heldout)})


def draft_from_target(target: CodecLM, n_layers: int) -> CodecLM:
    """The target's first ``n_layers`` with its embeddings, track, heads and final norm (no fine stage)."""
    return truncated_copy(target, n_layers, "backbone.layers").drop_fine_stage()


def train_draft(run_dir: Path, target_dir: Path, out_dir: Path, n_layers: int = 1,
                config: LMTrainConfig = LMTrainConfig(minutes=15.0), log=print) -> Path:
    """Distil a ``n_layers`` draft from the target on the prepared corpus of ``run_dir``."""
    out_dir = Path(out_dir)
    target = CodecLM.from_folder(str(target_dir)).eval()
    for p in target.parameters():
        p.requires_grad_(False)
    examples = [Example(**d) for d in torch.load(Path(run_dir) / "prepared.pt", weights_only=False)["examples"]]
    draft = draft_from_target(target, n_layers)
    for p in draft.parameters():
        p.requires_grad_(True)
    run = _Run(out_dir, draft, config, "draft", log)
    target.to(run.device)
    train, heldout = _split(examples, target.config.layout, target.config.track_positions, run.device)

    def loss_fn(batch: Sequence[LMSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            p = batch_logits(target, batch)
        per_cb = kl_per_codebook(batch_logits(draft, batch, config.dropout), p)
        return per_cb.mean(), per_cb.detach()

    @torch.no_grad()
    def evaluate() -> dict[str, Any]:
        q, p = batch_logits(draft, heldout), batch_logits(target, heldout)
        tv = tv_per_codebook(q, p)
        return {"kl": round(kl_per_codebook(q, p).mean().item(), 4),
                "acceptance_per_codebook": [round(1 - x, 3) for x in tv.tolist()]}

    if run.step == 0:
        log(f"new draft: {n_layers} of {target.config.num_hidden_layers} layers, "
            f"{draft.n_params() / 1e6:.2f} M parameters; before distillation {evaluate()}")
    run.loop(train, loss_fn, evaluate)
    return run.export("draft", {"target": str(target_dir), "distilled_layers": n_layers, "heldout_metrics": evaluate()})


# --- command line --------------------------------------------------------------------------------

def _train_config(args: argparse.Namespace) -> LMTrainConfig:
    return LMTrainConfig(minutes=args.minutes, batch_steps=args.batch_steps, lr=args.lr,
                         eval_every_steps=args.eval_every, seed=args.seed, threads=args.threads,
                         max_steps=args.max_steps, device=args.device, dropout=args.dropout)


def run_lm(args: argparse.Namespace) -> int:
    codec = Codec.from_folder(args.codec)
    asr = args.asr and Path(args.asr)
    model_config = default_target_config(codec, text_vocab(asr), num_hidden_layers=args.layers,
                                         hidden_size=args.hidden, intermediate_size=3 * args.hidden,
                                         coarse_first=args.layout == "coarse", fine_width=args.hidden,
                                         frames_per_step=args.frames_per_step)
    folder = train_target(Path(args.data), Path(args.codec), asr, Path(args.out), _train_config(args), model_config)
    print(f"exported {folder}")
    return 0


def run_draft(args: argparse.Namespace) -> int:
    folder = train_draft(Path(args.run), Path(args.target), Path(args.out), args.layers, _train_config(args))
    print(f"exported {folder}")
    return 0
