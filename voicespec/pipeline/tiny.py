"""Tiny randomly initialised models built from configs: for tests, the demo and smoke checks.

They are real ``transformers`` models (Llama), seeded, small enough to run hundreds of decodes a
second on a CPU. The draft for each is the target's own first layers copied into a smaller model,
so the pair agrees often enough to exercise long accepted runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from voicespec.codec.config import CodecConfig

from voicespec.codec.model import Codec
from voicespec.lm.codec_lm import CodecLM, CodecLMConfig, CodecStepLM, truncated_copy
from voicespec.lm.draft_heads import DraftHeads, DraftHeadsConfig
from voicespec.frontend.duration import DurationConfig, DurationModel
from voicespec.engine.layout import FlatLayout
from voicespec.frontend.phonemes import PhonemeTokenizer
from voicespec.lm.hf import HFCausalLM
from voicespec.lm.loading import attach_layout, save_model
from voicespec.frontend.text import CharTokenizer
from voicespec.pipeline.voice import Voice, VoiceConfig

TEXT_VOCAB = 32


def tiny_flat_layout(
    n_codebooks: int = 2, codebook_size: int = 8, min_frames: int = 0, text_vocab: int = TEXT_VOCAB
) -> FlatLayout:
    """ids: 0 start-of-audio, 1 EOS, 2 PAD, 3..3+text_vocab text, then the audio codes."""
    offset = 3 + text_vocab
    return FlatLayout(
        n_codebooks, codebook_size, audio_offset=offset, vocab_size=offset + n_codebooks * codebook_size,
        start_id=0, eos_id=1, pad_id=2, min_frames=min_frames,
    )


def tiny_flat(seed: int = 0, n_layers: int = 2, hidden: int = 64, dtype=torch.float32, **layout_kw: int) -> HFCausalLM:
    layout = tiny_flat_layout(**layout_kw)
    config = LlamaConfig(
        vocab_size=layout.vocab_size, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=2048, bos_token_id=None, eos_token_id=layout.eos_id, pad_token_id=layout.pad_id,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(dtype)
    attach_layout(model, layout)
    return HFCausalLM(model, layout)


def tiny_codec_lm(
    seed: int = 0, n_layers: int = 2, hidden: int = 64, n_codebooks: int = 3, codebook_size: int = 8,
    delays: list[int] | None = None, min_frames: int = 0, dtype=torch.float32, text_vocab: int = TEXT_VOCAB,
    track_positions: int = 0, coarse_first: bool = False, fine_reads_prev: bool = True, frames_per_step: int = 1,
) -> CodecStepLM:
    config = CodecLMConfig(
        text_vocab_size=text_vocab, n_codebooks=n_codebooks, codebook_size=codebook_size, delays=delays,
        min_frames=min_frames, track_positions=track_positions, coarse_first=coarse_first, fine_width=hidden,
        fine_reads_prev=fine_reads_prev, frames_per_step=frames_per_step,
        hidden_size=hidden, num_hidden_layers=n_layers, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=2048,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = CodecLM(config).to(dtype)
    return CodecStepLM(model)


def flat_draft(target: HFCausalLM, n_layers: int = 1) -> HFCausalLM:
    return HFCausalLM(truncated_copy(target.model, n_layers, "model.layers"), target.layout)


def codec_draft(target: CodecStepLM, n_layers: int = 1) -> CodecStepLM:
    return CodecStepLM(truncated_copy(target.model, n_layers, "backbone.layers").drop_fine_stage())


def tiny_draft_heads(target: CodecStepLM, kind: str = "feature", n_heads: int = 1, seed: int = 0,
                     width: int = 64, inference_weights: str = "float32") -> DraftHeads:
    """Random draft heads for ``target`` (a coarse-first tiny codec LM): a perturbed identity, so
    drafts are accepted often but not always."""
    config = DraftHeadsConfig(kind=kind, hidden_size=target.model.config.hidden_size, width=width, n_heads=n_heads,
                              inference_weights=inference_weights)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        heads = DraftHeads(config)
        with torch.no_grad():
            heads.w2.normal_(0, 0.05)
    return heads.eval()


TINY_CODEC = CodecConfig(
    n_filters=8, ratios=(8, 6, 5, 2), dimension=32, lstm=0, pad_mode="constant", n_q=4, n_codebooks=4, codebook_size=64
)


def tiny_duration(seed: int = 0, frames_per_char: float = 4.0, units: int = 0) -> DurationModel:
    """A random duration predictor whose output sits near ``frames_per_char``."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = DurationModel(DurationConfig(embed_dim=16, conv_channels=16, conv_layers=1, hidden=8, units=units))
    with torch.no_grad():
        model.head.bias.fill_(math.log1p(frames_per_char))
    return model.eval()


def build_tiny_voice(out: str | Path, layout: str = "delay", seed: int = 0) -> Path:
    """Write a complete random-weight voice folder (codec, target, a draft model): 24 kHz, 50 Hz,
    4 codebooks of 64. It babbles, but every stage from text to PCM runs for real. ``aligned``:
    the delay layout with a frame-aligned text track and a duration predictor, as the first
    voices were built; ``coarse``: coarse-first with a fine stage, aligned, reading phonemes, as
    voicespec-tiny is built; ``grouped``: the same with two frames per step, as the default voice."""
    out = Path(out)
    coarse = layout in ("coarse", "grouped")
    tokenizer = PhonemeTokenizer() if coarse else CharTokenizer()
    codec = Codec.random(TINY_CODEC, seed=seed)
    K, C = TINY_CODEC.n_codebooks, TINY_CODEC.codebook_size
    if layout == "flat":
        target = tiny_flat(seed=seed, n_codebooks=K, codebook_size=C, min_frames=10, text_vocab=tokenizer.vocab_size)
        draft, text_offset = flat_draft(target), 3
    elif layout in ("delay", "aligned", "coarse", "grouped"):
        target = tiny_codec_lm(seed=seed, n_codebooks=K, codebook_size=C, min_frames=10, text_vocab=tokenizer.vocab_size,
                               track_positions=8 if layout != "delay" else 0, coarse_first=coarse,
                               frames_per_step=2 if layout == "grouped" else 1)
        draft, text_offset = codec_draft(target), 0
    else:
        raise ValueError(f"unknown layout {layout!r} (flat, delay, aligned, coarse or grouped)")
    duration = None
    if layout != "delay" and layout != "flat":
        duration = "duration"
        tiny_duration(seed, units=tokenizer.vocab_size - 1 if coarse else 0).save(out / duration)
    codec.save(out / "codec")
    save_model(target.model, out / "target")
    save_model(draft.model, out / "drafters" / "draft-model")
    config = VoiceConfig(
        name=f"tiny-{layout}", tokenizer=tokenizer.to_dict(), text_offset=text_offset,
        sampling={"temperature": 0.8, "top_k": 20}, max_frames_per_char=4, min_max_frames=40, duration=duration,
        info={"weights": "random (seed %d); for tests and smoke runs, not speech" % seed},
    )
    Voice.write_config(out, config)
    return out
