"""How much of a grouped target's loss comes from what its backbone reads (issue 36).

A G = 2 target's backbone reads only each step's first coarse code: a verify pass embeds drafted
steps whose other codes do not exist until they are verified (docs/engine.md, "Grouped steps").
So between two of its positions it never sees the second frame's coarse code, which a one-frame
target reads every 20 ms. This trains the same target with that code embedded too (at the next
position, so nothing leaks: position j reads both coarse codes of step j - 1), on a run's prepared
corpus, with ``voicespec train lm``'s loop, schedule and held-out metric, and writes its
``metrics.jsonl`` to compare with the plain G = 2 run's at equal steps. A measurement, not a
recipe: no layout decodes such a target yet.

    python scripts/grouped_reads_nll.py --run runs/lm-g2 --out runs/lm-g2-pair

The schedule is the base run's: its time budget, and its final step count as a step budget, which
sets the cosine while this machine runs about as fast as the base run's did (whichever budget is
nearer its end wins: ``train.common.cosine_lr_factor``).

Run it alone on the machine (a training run: both cores).
"""

import argparse
import dataclasses
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import nn

from voicespec.lm.codec_lm import CodecLM, CodecLMConfig
from voicespec.train import lm
from voicespec.train.configs import LMTrainConfig


def second_coarse(seq: lm.LMSequence, G: int, none: int) -> torch.Tensor:
    """``[L]``: input position j's extra code, the coarse code of step j - 1's second frame
    (``none`` at BOS and where that step is short of a second frame)."""
    L, T = seq.inputs.shape[0], seq.frames.shape[0]
    out = torch.full((L,), none, dtype=torch.long, device=seq.frames.device)
    idx = G * torch.arange(L - 1, device=seq.frames.device) + 1
    real = idx < T
    out[1:][real] = seq.frames[idx[real], 0]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", type=Path, required=True, help="the plain grouped run: its prepared corpus and shape")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--max-steps", type=int, default=0, help="default: the base run's final step")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    base = torch.load(args.run / "checkpoint.pt", map_location="cpu", weights_only=False)
    config = CodecLMConfig.from_dict(base["model_config"])
    train_config = dataclasses.replace(LMTrainConfig(**base["train_config"]), max_steps=args.max_steps or base["step"],
                                       threads=args.threads)
    G, C = config.frames_per_step, config.codebook_size
    examples = [lm.Example(**d) for d in torch.load(args.run / "prepared.pt", weights_only=False)["examples"]]

    model = CodecLM(config)
    model.pair = nn.Embedding(C + 1, config.hidden_size)  # the second coarse code; C: none
    nn.init.normal_(model.pair.weight, std=config.initializer_range)
    plain_outputs = lm.batch_outputs

    def batch_outputs(m: CodecLM, seqs: Sequence[lm.LMSequence], dropout: float = 0.0) -> list[lm.Outputs]:
        embed, order = m.embed, iter(seqs)  # lm.batch_outputs embeds each sequence once, in order

        def with_pair(text_ids, codes, track):
            seq, x = next(order), embed(text_ids, codes, track)
            if not torch.equal(seq.inputs, codes[0]):
                raise RuntimeError("lm.batch_outputs no longer embeds its sequences one by one, in order")
            S = text_ids.shape[1]
            return torch.cat([x[:, :S], x[:, S:] + m.pair(second_coarse(seq, G, C))[None]], 1)

        m.embed = with_pair
        try:
            return plain_outputs(m, seqs, dropout)
        finally:
            del m.embed

    lm.batch_outputs = batch_outputs  # train_target's loss and held-out metric both call it
    run = lm._Run(args.out, model, train_config, "lm (both coarse codes read)")
    train, heldout = lm._split(examples, config.layout, config.track_positions, run.device)

    def loss_fn(batch: Sequence[lm.LMSequence]) -> tuple[torch.Tensor, torch.Tensor]:
        per_cb = lm.ce_per_codebook(lm.batch_outputs(model, batch, train_config.dropout), batch, model)
        return per_cb.mean(), per_cb.detach()

    run.loop(train, loss_fn, lambda: lm.heldout_ce(model, heldout))
    print("held-out:", lm.heldout_ce(model, heldout))


if __name__ == "__main__":
    main()
