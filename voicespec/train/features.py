"""Feature-level drafters (EAGLE-style) and Medusa heads for a coarse-first target: ``voicespec train features``.

Both read the target's final hidden state, so they are distilled on what they will see at run
time: the target's *own sampled* outputs at the voice's settings (``sample_corpus``: batched plain
decoding of the training prompts, prompts made by the voice's own duration predictor), then the
frozen target teacher-forced over those samples gives every hidden state ``f_t [D]`` and every
next-step distribution ``p_{t+1}``. The drafters are trained by unrolling them over their own
predictions (EAGLE-3's "training-time test"): the feature drafter predicts ``f_{t+1}`` from
``f_t`` and the committed step's embedding, then ``f_{t+2}`` from its own ``f̂_{t+1}``, and so
on, each step scored by ``KL(p || q)`` at the voice's temperature — in sampling mode a drafted
token is accepted with probability ``1 - TV(p, q)`` — plus, optionally (``--greedy-weight``), the
cross-entropy of the target's argmax, which is all a greedy verdict asks about. Medusa head ``k``
predicts step ``t+1+k`` from ``f_t`` alone. Prompts come from the target's teacher corpus
(``--run``) or from the corpus grammar (no teacher needed); ``--init`` continues shipped heads on
new samples; ``--greedy-every`` mixes greedy trajectories (what greedy decoding drafts along) into
the training split.

Checkpointed like every recipe (``OUT/samples.pt`` grows batch by batch and resumes; training
writes ``OUT/KIND_run/checkpoint.pt``); exports an HF-style folder ``OUT/KIND_run/KIND`` and, with
``--ship``, copies it into the voice as ``drafters/KIND`` with a model card.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import torch

from voicespec.lm.codec_lm import END_ROW, CodecLM
from voicespec.lm.draft_heads import DraftHeads, DraftHeadsConfig
from voicespec.pipeline.voice import VOICE_FILE, Voice
from voicespec.train.common import TrainingRun, cosine_lr_factor, hardware, save_atomic
from voicespec.train.configs import FEATURES_CORPUS_SEED, LMTrainConfig
from voicespec.train.corpus import build_corpus
from voicespec.train.data import split_of
from voicespec.train.speak import speak

SAMPLES = "samples.pt"


def prepared_examples(run_dir: Path) -> list[dict[str, Any]]:
    """The prompts of a target's run folder (``RUN/prepared.pt``: its teacher corpus), every
    held-out one first: ``{"id", "ids", "split"}`` each."""
    return _heldout_first(torch.load(run_dir / "prepared.pt", weights_only=False)["examples"])


def _heldout_first(examples: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Held-out prompts first, so any ``--utterances`` keeps some to evaluate on."""
    return [e for e in examples if e["split"] == "heldout"] + [e for e in examples if e["split"] == "train"]


def corpus_examples(voice: Voice, n: int, seed: int) -> list[dict[str, Any]]:
    """Prompts without the teacher corpus: the sentences of ``n`` utterances of the project's
    corpus grammar (:mod:`voicespec.train.corpus`, seed ``seed``) through the voice's own front
    end, split by utterance id as the teacher corpus is (:func:`~voicespec.train.data.split_of`),
    every held-out one first."""
    examples = [{"id": f"{s.id}.{j}", "ids": list(ids), "split": split_of(s.id)}
                for s in build_corpus(n, seed) for j, (_, ids) in enumerate(voice.frontend.sentences(s.text))]
    return _heldout_first(examples)


def sample_corpus(voice_dir: Path, examples: Sequence[dict[str, Any]], out_dir: Path, n: int, batch: int = 48,
                  seed: int = 0, log=print, greedy_every: int = 0) -> list[dict[str, Any]]:
    """The target's own samples (plain decoding, the voice's sampling settings, seed ``seed + i``)
    for the first ``n`` of ``examples`` (``{"id", "ids", "split"}``: :func:`prepared_examples` or
    :func:`corpus_examples`), in batches of ``batch`` decoded together; with ``greedy_every`` k,
    training utterance ``i`` is decoded greedily where ``i % k == 0`` (the trajectories greedy
    decoding drafts along; held-out ones stay sampled, so their metrics keep one meaning). Each
    item: ``ids``, ``track [T, 4]`` (the voice's prompt), ``steps [L]`` (coarse codes, EOS last),
    ``split`` and ``greedy``. Resumes from ``OUT/samples.pt`` if it holds these prompts, decoded so."""
    if not (type(greedy_every) is int and greedy_every >= 0):
        raise ValueError(f"greedy_every must be an integer >= 0 (0: no greedy utterances), got {greedy_every!r}")
    if not (type(batch) is int and batch > 0):
        raise ValueError(f"batch must be an integer > 0, got {batch!r}")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / SAMPLES
    done: list[dict[str, Any]] = torch.load(path, weights_only=False) if path.exists() else []
    chosen = list(examples[:n])

    def greedy_at(i: int) -> bool:
        return bool(greedy_every) and chosen[i]["split"] == "train" and i % greedy_every == 0

    made = [(d["id"], bool(d.get("greedy"))) for d in done]
    if made != [(e["id"], greedy_at(i)) for i, e in enumerate(chosen[:len(done)])]:
        raise ValueError(f"{path} holds samples of other prompts or another --greedy-every than this run asks "
                         "for (a different --utterances, --corpus-seed or --run?): use a new --out, or the same arguments")
    voice = Voice.load(voice_dir)
    layout = voice.target.layout
    t0 = time.perf_counter()
    while len(done) < len(chosen):
        part = chosen[len(done): len(done) + batch]
        prompts = [voice.prompt(e["ids"]) for e in part]
        greedy = [greedy_at(len(done) + i) for i in range(len(part))]
        frames = speak(voice, prompts, [seed + len(done) + i for i in range(len(part))], greedy)
        for e, p, f, g in zip(part, prompts, frames, greedy):
            steps = layout.steps_for_frames(f)[:, 0]  # coarse codes, EOS appended
            done.append({"id": e["id"], "ids": list(e["ids"]), "track": torch.as_tensor(p.track, dtype=torch.int16),
                         "steps": steps.to(torch.int16), "split": e["split"], "greedy": g})
        save_atomic(done, path)
        rate = sum(int(d["track"].shape[0]) for d in done) / 50 / (time.perf_counter() - t0)  # frames / 50 Hz
        log(f"sampled {len(done)}/{len(chosen)} utterances ({rate:.1f} s of audio per s)")
    return done


# --- the frozen target's view of the samples ---------------------------------------------------------

class Features:
    """The frozen target teacher-forced over sampled utterances, right-padded to ``[B, L]``.

    ``f [B, L+1, D]``: the final hidden state before each input step (row 0: the last text position,
    before the pending BOS of the first verify pass), so row ``j``
    is what a drafter holds when step ``j`` is pending and row ``j+1`` what the target computes once
    it is fed. ``e [B, L, D]``: the target's input embedding of step ``j`` (code + track row).
    ``valid [B, L]``: real positions.
    """

    def __init__(self, target: CodecLM, samples: Sequence[dict[str, Any]], device: torch.device) -> None:
        layout = target.config.layout
        fs, es, lengths = [], [], []
        with torch.no_grad():
            for s in samples:
                steps = s["steps"].long()
                inputs = torch.cat([torch.tensor([layout.bos_id]), steps[:-1]])[None, :, None]  # [1, L, 1]
                L = inputs.shape[1]
                track = torch.tensor(END_ROW).repeat(L, 1)
                rows = s["track"][:: layout.frames_per_step]  # a step reads its first frame's row
                n = min(L, rows.shape[0])
                track[:n] = rows[:n].long()
                text = torch.tensor(s["ids"])[None]
                e = target.embed(None, inputs, track[None])  # [1, L, D]
                h = target.backbone(target.embed(text, inputs, track[None]))
                fs.append(h[0, text.shape[1] - 1:].half())  # [L+1, D]
                es.append(e[0].half())
                lengths.append(L)
        self.f = torch.nn.utils.rnn.pad_sequence(fs, batch_first=True).to(device)
        self.e = torch.nn.utils.rnn.pad_sequence(es, batch_first=True).to(device)
        self.lengths = torch.tensor(lengths, device=device)
        self.valid = torch.arange(self.e.shape[1], device=device)[None] < self.lengths[:, None]

    def __len__(self) -> int:
        return self.f.shape[0]


def warped_log_probs(logits: torch.Tensor, temperature: float, top_k: int) -> torch.Tensor:
    """The voice's sampling distribution (temperature, then top-k) as log-probabilities (-inf outside)."""
    x = logits / temperature
    if top_k:
        kth = x.topk(min(top_k, x.shape[-1]), -1).values[..., -1:]
        x = x.masked_fill(x < kth, float("-inf"))
    return x.log_softmax(-1)


def unrolled_outputs(heads: DraftHeads, feats: Features, idx: torch.Tensor, depth: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(predicted feature, target feature)`` pairs ``[B, L-s, D]`` for drafted position ``s`` =
    0..depth-1 of every window. Feature drafter: each step reads the previous step's prediction and
    the next real step's embedding. Medusa: head ``s`` reads the same ``(f, e)`` as step 0."""
    f, e = feats.f[idx].float(), feats.e[idx].float()
    L = e.shape[1]
    out = []
    if heads.config.kind == "feature":
        cur = f[:, :L]
        for s in range(min(depth, L)):
            B, n, D = cur.shape
            cur = heads(cur.reshape(-1, D), e[:, s:].reshape(-1, D))[0].view(B, n, D)
            out.append((cur, f[:, 1 + s:]))
            cur = cur[:, :-1]
    else:
        B, _, D = f.shape
        pred = heads(f[:, :L].reshape(-1, D), e.reshape(-1, D)).view(-1, B, L, D)  # [H, B, L, D]
        for s in range(min(heads.config.n_heads, L)):
            out.append((pred[s, :, : L - s], f[:, 1 + s:]))
    return out


def _valid_from(feats: Features, idx: torch.Tensor, s: int) -> torch.Tensor:
    return feats.valid[idx][:, s:]


def distill_loss(heads: DraftHeads, target: CodecLM, feats: Features, idx: torch.Tensor, depth: int,
                 temperature: float, top_k: int, greedy_weight: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean ``KL(p || q)`` over drafted positions, with ``greedy_weight`` w plus ``w · -log q(argmax
    p)`` (a greedy verdict only asks whether the draft's top token is the target's, which the KL
    over the whole distribution weighs little); and that loss per position ``[depth]``."""
    per = []
    for s, (pred, true) in enumerate(unrolled_outputs(heads, feats, idx, depth)):
        ok = _valid_from(feats, idx, s)
        with torch.no_grad():
            logp = warped_log_probs(target.heads(true[ok]), temperature, top_k)
        logq = (target.heads(pred[ok]) / temperature).log_softmax(-1)
        loss = (logp.exp() * (logp - logq).nan_to_num(neginf=0.0)).sum(-1).mean()  # 0·log 0 = 0 outside top-k
        if greedy_weight:
            loss = loss - greedy_weight * logq.gather(-1, logp.argmax(-1, keepdim=True)).mean()
        per.append(loss)
    per_t = torch.stack(per)
    return per_t.mean(), per_t.detach()


@torch.no_grad()
def acceptance(heads: DraftHeads, target: CodecLM, feats: Features, depth: int, temperature: float,
               top_k: int, chunk: int = 64) -> dict[str, Any]:
    """Per drafted position: sampling acceptance ``1 - TV(p, q)`` (both warped as at run time) and
    greedy acceptance (argmax agreement), given every earlier draft accepted; and the expected steps
    one verify pass commits with ``γ = depth`` (``1 + Σ Π α``)."""
    tv_sum, hit_sum, count = torch.zeros(depth), torch.zeros(depth), torch.zeros(depth)
    for lo in range(0, len(feats), chunk):
        idx = torch.arange(lo, min(lo + chunk, len(feats)), device=feats.f.device)
        for s, (pred, true) in enumerate(unrolled_outputs(heads, feats, idx, depth)):
            ok = _valid_from(feats, idx, s)
            lp, lq = target.heads(true[ok]), target.heads(pred[ok])
            p, q = warped_log_probs(lp, temperature, top_k).exp(), warped_log_probs(lq, temperature, top_k).exp()
            tv_sum[s] += (1 - 0.5 * (p - q).abs().sum(-1)).sum().cpu()
            hit_sum[s] += (lp.argmax(-1) == lq.argmax(-1)).sum().cpu()
            count[s] += ok.sum().cpu()
    sampling, greedy = (tv_sum / count.clamp_min(1)).tolist(), (hit_sum / count.clamp_min(1)).tolist()

    def steps(alphas: list[float]) -> float:
        total, run = 1.0, 1.0
        for a in alphas:
            run *= a
            total += run
        return round(total, 3)

    return {"sampling": [round(a, 3) for a in sampling], "greedy": [round(a, 3) for a in greedy],
            "sampling_steps_per_pass": steps(sampling), "greedy_steps_per_pass": steps(greedy)}


def check_greedy_weight(weight: float) -> None:
    if not (type(weight) in (int, float) and 0 <= weight < float("inf")):
        raise ValueError(f"greedy_weight must be a finite number >= 0 (0: the KL alone), got {weight!r}")


def check_init(init: Path, kind: str, width: int, n_heads: int, hidden_size: int | None = None) -> None:
    """Heads in ``init`` can continue as ``kind`` heads of this width and count (and hidden size,
    when the target's is known)."""
    try:
        c = DraftHeadsConfig.read(str(init))
    except OSError as e:
        raise ValueError(f"--init {init}: no draft heads there ({e})") from None
    if (c.kind, c.width, c.n_heads) != (kind, width, n_heads) or hidden_size not in (None, c.hidden_size):
        raise ValueError(f"--init {init}: {c.kind} heads of width {c.width} ({c.n_heads} heads, hidden "
                         f"{c.hidden_size}) cannot continue as {kind} heads of width {width} "
                         f"({n_heads} heads, hidden {hidden_size or 'any'})")


def train_heads(samples_dir: Path, target_dir: Path, out_dir: Path, kind: str, depth: int, width: int,
                temperature: float, top_k: int, config: LMTrainConfig, log=print, init: Path | None = None,
                greedy_weight: float = 0.0) -> Path:
    """Distil ``kind`` heads (``feature`` or ``medusa``) for the target in ``target_dir`` on the
    samples in ``samples_dir``; export ``OUT/<kind>``. ``init``: heads to start from (exported or
    shipped, of this kind and width): more distillation on new samples without the old ones; the
    first evaluation is theirs, the baseline. A checkpoint in ``out_dir`` still wins (resume).
    ``greedy_weight``: see :func:`distill_loss`."""
    check_greedy_weight(greedy_weight)
    run = TrainingRun(out_dir, config.seed, config.threads, config.checkpoint_every_s, log, config.device)
    target = CodecLM.from_folder(str(target_dir)).eval().to(run.device)
    for p in target.parameters():
        p.requires_grad_(False)
    samples = torch.load(Path(samples_dir) / SAMPLES, weights_only=False)
    train = Features(target, [s for s in samples if s["split"] == "train"], run.device)
    n_greedy = sum(bool(s.get("greedy")) for s in samples if s["split"] == "train")
    heldout = Features(target, [s for s in samples if s["split"] == "heldout"], run.device)
    log(f"{len(train)} training and {len(heldout)} held-out sampled utterances")
    cfg = DraftHeadsConfig(kind=kind, hidden_size=target.config.hidden_size, width=width,
                           n_heads=depth if kind == "medusa" else 1, distill_temperature=temperature)
    if init is not None:
        check_init(init, cfg.kind, cfg.width, cfg.n_heads, cfg.hidden_size)
        heads = DraftHeads.from_folder(str(init)).to(run.device)
        heads.config.voicespec_info = {}
        heads.config.distill_temperature = temperature  # what these samples were drawn at; inference_weights stay
    else:
        heads = DraftHeads(cfg).to(run.device)
    opt = torch.optim.AdamW(heads.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    run.attach(heads, opt, lambda: {"model_config": heads.config.to_dict(), "train_config": asdict(config)})
    per_batch = min(len(train), max(1, config.batch_steps // int(train.lengths.float().mean())))
    order: list[int] = []
    if init is not None and run.step == 0:
        run.record({"step": 0, "init": str(init), "heldout": acceptance(heads.eval(), target, heldout, depth, temperature, top_k)})
    heads.train()
    while run.trained_s < config.minutes * 60 and not (config.max_steps and run.step >= config.max_steps):
        t0 = time.perf_counter()
        if len(order) < per_batch:
            order = list(range(len(train)))
            run.rng.shuffle(order)
        idx = torch.tensor([order.pop() for _ in range(per_batch)], device=run.device)
        loss, per = distill_loss(heads, target, train, idx, depth, temperature, top_k, greedy_weight)
        lr = config.lr * cosine_lr_factor(run.step, run.trained_s, config.warmup_steps, config.minutes,
                                          config.final_lr_frac, config.max_steps)
        grad = run.update(loss, lr, t0)
        if run.step % config.log_every_steps == 0:
            run.record({"step": run.step, "trained_min": round(run.trained_s / 60, 2), "loss": round(loss.item(), 4),
                        "per_position": [round(x, 3) for x in per.tolist()], "grad_norm": grad, "lr": lr})
        if run.step % config.eval_every_steps == 0:
            heads.eval()
            run.record({"step": run.step, "heldout": acceptance(heads, target, heldout, depth, temperature, top_k)})
            heads.train()
        run.maybe_save()
    run.save()
    heads.eval()
    path = out_dir / kind
    heads.config.voicespec_info = {
        "recipe": f"voicespec train features --kind {kind}", "target": str(target_dir), "steps": run.step,
        **({"init": str(init)} if init is not None else {}), **({"greedy_weight": greedy_weight} if greedy_weight else {}),
        "trained_minutes": round(run.trained_s / 60, 1), "hardware": hardware(run.device),
        "train_config": asdict(config), "parameters": heads.n_params(),
        "samples": f"{len(train)} utterances sampled from the target (temperature {temperature}, top-k {top_k}"
                   + (f"; {n_greedy} of them greedy)" if n_greedy else ")"),
        "heldout_acceptance": acceptance(heads, target, heldout, depth, temperature, top_k),
    }
    heads.save(path)
    return path


SUMMARIES = {
    "feature": ("A feature-level drafter (EAGLE-style): one residual MLP block ({width} wide) predicts the target's next "
                "final hidden state from its current one and the target's embedding of the step just committed, and the "
                "target's own heads read it out; applied recurrently, fed its own predictions and drafted steps."),
    "medusa": ("Medusa/MTP heads: {n} residual MLP blocks ({width} wide) on the target's final hidden state and the "
               "pending step's embedding, head k predicting the state k steps ahead; the target's heads read them out."),
}


def ship_heads(folder: Path, dest: Path, command: str) -> Path:
    """Copy exported draft heads into a voice's ``drafters/`` folder (``dest``) with a model card
    titled with that voice's name."""
    from voicespec.train.ship import card

    if dest.parent.name != "drafters" or not (dest.parent.parent / VOICE_FILE).is_file():
        raise ValueError(f"{dest}: draft heads ship into a voice folder's drafters/KIND")
    voice = Voice.read_config(dest.parent.parent).name
    heads = DraftHeads.from_folder(str(folder))
    heads.save(dest)
    info = dict(getattr(heads.config, "voicespec_info", {}))
    metrics = info.pop("heldout_acceptance", {})
    c = heads.config
    summary = SUMMARIES[c.kind].format(width=c.width, n=c.n_heads) + (
        " Distilled on the target's own samples at the voice's sampling settings, unrolled over its own predictions. "
        "`sampling` is the held-out per-position acceptance 1 - TV(p, q) (both warped as at run time) given every "
        "earlier draft accepted; `greedy` the argmax agreement.")
    (dest / "MODEL_CARD.md").write_text(card(f"{voice} {c.kind} draft heads", summary, info, metrics, command))
    return dest


def run_features(args: argparse.Namespace) -> int:
    voice = Path(args.voice)
    check_greedy_weight(args.greedy_weight)  # before hours of sampling, not after (the CLI's type lets inf through)
    if args.init:
        check_init(Path(args.init), args.kind, args.width, args.depth if args.kind == "medusa" else 1)
    if args.run and args.corpus_seed is not None:
        raise ValueError("--corpus-seed makes prompts from the corpus grammar; --run takes them from the target's run")
    examples = (prepared_examples(Path(args.run)) if args.run
                else corpus_examples(Voice.load(voice), args.utterances,
                                   FEATURES_CORPUS_SEED if args.corpus_seed is None else args.corpus_seed))
    sample_corpus(voice, examples, Path(args.out), args.utterances, args.batch, args.seed, greedy_every=args.greedy_every)
    sampling = Voice.load(voice).sampling
    config = LMTrainConfig(minutes=args.minutes, batch_steps=args.batch_steps, lr=args.lr, seed=args.seed,
                           threads=args.threads, max_steps=args.max_steps, device=args.device,
                           eval_every_steps=args.eval_every)
    folder = train_heads(Path(args.out), voice / "target", Path(args.out) / f"{args.kind}_run", args.kind, args.depth,
                         args.width, sampling.temperature or 1.0, sampling.top_k, config,
                         init=Path(args.init) if args.init else None, greedy_weight=args.greedy_weight)
    print(f"exported {folder}")
    if args.ship:
        print(f"shipped {ship_heads(folder, voice / 'drafters' / args.kind, args.command or 'voicespec train features')}")
    return 0
