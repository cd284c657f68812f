"""The training recipes' arguments. Their defaults come from :mod:`voicespec.train.configs`
(standard library only), so a recipe's ``--help`` and its argument errors need no torch; the
recipe itself (``run_*`` in its module) is imported when it runs."""

from __future__ import annotations

import argparse

from voicespec.cli.args import positive
from voicespec.codec.config import DECODERS, CodecConfig
from voicespec.train.configs import (
    DEFAULT_CODEC, DEFAULT_HELDOUT_MOD, DRAFT_NAME, ENCODERS, FEATURES_CORPUS_SEED, AsrTrainConfig, DurationTrainConfig, LMTrainConfig,
    TrainConfig,
)


def add_data_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="corpus folder (made or resumed)")
    p.add_argument("--hours", type=float, required=True, help="stop once this much audio exists")
    p.add_argument("--sample-rate", type=int, default=24000, help="output rate, the codec's (default 24000)")
    p.add_argument("--seed", type=int, default=0, help="sentence and teacher-noise seed (default 0)")
    p.add_argument("--heldout-mod", type=int, default=DEFAULT_HELDOUT_MOD,
                   help=f"hold out ids with crc32(id) %% N == 0 (default {DEFAULT_HELDOUT_MOD}, about 2%%)")
    p.add_argument("--threads", type=int, help="onnxruntime threads for the teacher (default: all cores)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_codec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="teacher corpus folder (from `voicespec train data`)")
    p.add_argument("--out", required=True, help="run folder: checkpoint, metrics, exported codec")
    p.add_argument("--minutes", type=float, default=TrainConfig.minutes, help="total training time budget")
    p.add_argument("--max-steps", type=int, default=0, help="also stop after this many steps (0: time budget only)")
    p.add_argument("--batch-size", type=int, default=TrainConfig.batch_size)
    p.add_argument("--segment-s", type=float, default=TrainConfig.segment_s)
    p.add_argument("--eval-every", type=int, default=TrainConfig.eval_every_steps)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--init-from", help="start from an exported codec folder (weights + step/time counts)")
    p.add_argument("--decoder-only", action="store_true",
                   help="train only the decoder: every code stays the same, so an LM trained on them stays valid")
    p.add_argument("--adversarial", action="store_true",
                   help="decoder-only, plus multi-period and multi-resolution discriminators (LSGAN + feature "
                        "matching); implies --decoder-only")
    p.add_argument("--decoder", choices=DECODERS,
                   help="decoder architecture (default: the --init-from codec's, else seanet); with --init-from "
                        "a different one starts fresh on the start's encoder and quantizer")
    p.add_argument("--decoder-dim", type=int, default=CodecConfig.decoder_dim, help="istft decoder width")
    p.add_argument("--decoder-layers", type=int, default=CodecConfig.decoder_layers, help="istft decoder blocks")
    p.add_argument("--filters", type=int, default=DEFAULT_CODEC.n_filters,
                   help="SEANet encoder width (n_filters) of a new codec; the encoder runs only to encode audio")
    p.add_argument("--lr", type=float, default=TrainConfig.lr)
    p.add_argument("--device", default=TrainConfig.device, help="auto (the GPU if there is one), cpu, cuda, cuda:1, ...")


def add_asr_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="teacher corpus folder (from `voicespec train data`)")
    p.add_argument("--out", required=True, help="run folder: checkpoint, metrics, exported recognizer (OUT/asr)")
    p.add_argument("--minutes", type=float, default=AsrTrainConfig.minutes, help="total training time budget")
    p.add_argument("--max-steps", type=int, default=0, help="also stop after this many steps (0: time budget only)")
    p.add_argument("--batch-seconds", type=float, default=AsrTrainConfig.batch_seconds,
                   help="padded audio seconds per batch")
    p.add_argument("--lr", type=float, default=AsrTrainConfig.lr)
    p.add_argument("--eval-every", type=int, default=AsrTrainConfig.eval_every_steps, help="steps between held-out CER")
    p.add_argument("--encoder", choices=sorted(ENCODERS), default="gru",
                   help="bidirectional GRU (default) or transformer (about 2x faster per step on CPU); "
                        "a resumed run keeps its checkpoint's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)


def add_duration_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--items", required=True,
                   help='JSONL, one utterance a line: {"ids": [...], "durations": [...], "split": "train"|"heldout"}')
    p.add_argument("--out", required=True, help="run folder: checkpoint, metrics, exported predictor (OUT/duration)")
    p.add_argument("--minutes", type=float, default=DurationTrainConfig.minutes, help="total training time budget")
    p.add_argument("--max-steps", type=int, default=0, help="also stop after this many steps (0: time budget only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--units", type=int, default=0,
                   help="ids are 1..N of a unit tokenizer (a phoneme voice's vocab_size - 1); 0: the default alphabet")


def _budget_args(p: argparse.ArgumentParser, minutes: float) -> None:
    p.add_argument("--minutes", type=float, default=minutes, help="total training time budget (across resumes)")
    p.add_argument("--batch-steps", type=int, default=LMTrainConfig.batch_steps, help="padded frames per batch")
    p.add_argument("--lr", type=float, default=LMTrainConfig.lr)
    p.add_argument("--eval-every", type=int, default=LMTrainConfig.eval_every_steps)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--dropout", type=float, default=LMTrainConfig.dropout, help="dropout on the input embeddings")
    p.add_argument("--max-steps", type=int, default=0, help="also stop after this many steps (0: time budget only)")
    p.add_argument("--device", default=LMTrainConfig.device, help="auto (the GPU if there is one), cpu, cuda, ...")


def add_lm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", required=True, help="teacher corpus folder (from `voicespec train data`)")
    p.add_argument("--codec", required=True, help="codec folder whose codes the LM speaks")
    p.add_argument("--asr", help="character units: CTC recognizer folder for forced alignment (`voicespec train asr`); "
                                 "default: phoneme units, durations from the teacher's own alignment")
    p.add_argument("--layout", choices=("coarse", "delay"), default="coarse",
                   help="coarse: the LM predicts codebook 0, a fine stage the rest (default); delay: MusicGen delays")
    p.add_argument("--out", required=True, help="run folder: prepared data, checkpoint, metrics, OUT/target")
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--frames-per-step", type=positive(int, "--frames-per-step"), default=1,
                   help="coarse layout: codec frames per backbone step (G; the fine stage completes the rest of the step)")
    _budget_args(p, LMTrainConfig.minutes)


def add_draft_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="the target's run folder (its prepared.pt is the training data)")
    p.add_argument("--target", required=True, help="target LM folder to distil from")
    p.add_argument("--out", required=True, help="run folder: checkpoint, metrics, OUT/draft")
    p.add_argument("--layers", type=int, default=1, help="target layers the draft keeps")
    _budget_args(p, 15.0)


def add_features_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", required=True, help="voice folder whose target the heads read (models/voicespec-tiny)")
    p.add_argument("--run", help="the target's run folder (its prepared.pt holds the prompts); "
                                 "default: prompts from the corpus grammar (--corpus-seed), no teacher needed")
    p.add_argument("--corpus-seed", type=int, help=f"seed of the corpus grammar for prompts without --run (default {FEATURES_CORPUS_SEED})")
    p.add_argument("--out", required=True, help="run folder: OUT/samples.pt (the target's samples), OUT/KIND_run/")
    p.add_argument("--init", help="heads folder to start from (e.g. VOICE/drafters/feature): more distillation on new samples")
    p.add_argument("--kind", choices=("feature", "medusa"), default="feature",
                   help="feature: one block applied recurrently (EAGLE-style); medusa: one head per draft position")
    p.add_argument("--depth", type=int, default=5, help="draft positions trained (medusa: its heads)")
    p.add_argument("--width", type=int, default=1024, help="the blocks' hidden width")
    p.add_argument("--utterances", type=positive(int, "--utterances"), default=2000,
                   help="prompts to sample the target on (held-out ones first)")
    p.add_argument("--batch", type=positive(int, "--batch"), default=48, help="prompts decoded together while sampling")
    p.add_argument("--greedy-every", type=positive(int, "--greedy-every", allow_zero=True), default=0,
                   help="decode training prompts 0, k, 2k, ... greedily (the trajectories greedy decoding drafts "
                        "along; held-out ones stay sampled); 0: none")
    p.add_argument("--greedy-weight", type=positive(float, "--greedy-weight", allow_zero=True), default=0.0,
                   help="add this weight times -log q(target's argmax) to the KL: favours greedy agreement (0: off)")
    p.add_argument("--ship", action="store_true", help="copy the result into VOICE/drafters/KIND with a model card")
    p.add_argument("--command", help="the command line, for the model card")
    _budget_args(p, 18.0)


def add_fine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--voice", required=True, help="voice folder whose target's fine stage is distilled (models/voicespec-tiny)")
    p.add_argument("--out", required=True, help="run folder: OUT/fine_samples.pt, OUT/run/, OUT/voice/ (the voice with the new stage)")
    p.add_argument("--utterances", type=int, default=600, help="corpus sentences the target speaks for the samples")
    p.add_argument("--corpus-seed", type=int, default=7, help="seed of the corpus grammar for those sentences")
    p.add_argument("--batch", type=int, default=48, help="sentences decoded together while sampling")
    p.add_argument("--minutes", type=float, default=15.0, help="training time budget (across resumes)")
    p.add_argument("--batch-frames", type=int, default=2048, help="steps (of the target's frames per step) per training batch")
    p.add_argument("--width", type=positive(int, "--width"), help="the new stage's width (default: the old one's, "
                                                                   "whose weights it starts from; another starts from scratch)")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--max-steps", type=int, default=0, help="also stop after this many steps (0: time budget only)")
    p.add_argument("--command", help="the command line, for the model card")


def add_ship_codec_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--codec", required=True, help="exported codec folder (RUN/codec)")
    p.add_argument("--data", required=True, help="the teacher corpus it was trained on (held-out samples, hours)")
    p.add_argument("--dest", required=True, help="destination codec folder (models/voicespec-tiny/codec)")
    p.add_argument("--samples", default="samples", help="folder for the teacher/resynthesis WAVs and mel PNG")
    p.add_argument("--command", required=True, help="the command(s) that trained it, for the model card")
    p.add_argument("--previous", help="the codec it replaces (may be --dest itself, read before it is overwritten): "
                                      "its resynthesis joins the samples, and its held-out metrics the card")


def add_ship_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", required=True, help="exported target folder (RUN/target)")
    p.add_argument("--draft", required=True, help="exported draft folder (RUN/draft)")
    p.add_argument("--duration", required=True, help="exported duration folder (RUN/duration)")
    p.add_argument("--asr", required=True, help="exported recognizer folder (RUN/asr)")
    p.add_argument("--dest", required=True, help="voice folder holding codec/ already (models/voicespec-tiny)")
    p.add_argument("--commands", required=True, help="JSON: the command that trained each part (lm, draft, duration, asr)")
    p.add_argument("--sampling", default='{"temperature": 0.8, "top_k": 50}', help="JSON SamplingConfig defaults")
    p.add_argument("--ngram", default="{}", help="JSON NGramDrafter settings")
    p.add_argument("--info", default="{}", help="JSON provenance/metrics for voice.json")
    p.add_argument("--codec-chunk-frames", type=int, default=1,
                   help="frames the codec decodes together when streaming: its first block (see `voicespec bench`)")
    p.add_argument("--codec-chunk-max-frames", type=int, default=None,
                   help="later blocks double up to this many frames; the fine stage completes frames at the same "
                        "block ends (default: every block --codec-chunk-frames)")
    p.add_argument("--evaluation", help="a `voicespec evaluate` report: its judge table goes into the target's card")
    p.add_argument("--default-drafter", default=DRAFT_NAME,
                   help=f"the voice's default drafter: none, ngram or {DRAFT_NAME} (pick what `voicespec bench` measures fastest)")
