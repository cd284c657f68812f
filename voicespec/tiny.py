"""Tiny randomly initialised models built from configs: for tests, the demo and smoke checks.

They are real ``transformers`` models (Llama), seeded, small enough to run hundreds of decodes a
second on a CPU. The draft for each is the target's own first layers copied into a smaller model,
so the pair agrees often enough to exercise long accepted runs.
"""

from __future__ import annotations

import copy

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from .codec_lm import CodecLM, CodecLMConfig, CodecStepLM
from .layout import FlatLayout
from .lm import HFCausalLM
from .loading import attach_layout

TEXT_VOCAB = 32


def tiny_flat_layout(n_codebooks: int = 2, codebook_size: int = 8, min_frames: int = 0) -> FlatLayout:
    """ids: 0 start-of-audio, 1 EOS, 2 PAD, 3..3+TEXT_VOCAB text, then the audio codes."""
    offset = 3 + TEXT_VOCAB
    return FlatLayout(
        n_codebooks, codebook_size, audio_offset=offset, vocab_size=offset + n_codebooks * codebook_size,
        start_id=0, eos_id=1, pad_id=2, min_frames=min_frames,
    )




def truncated_copy(model: torch.nn.Module, n_layers: int, layers_attr: str) -> torch.nn.Module:
    """A copy of ``model`` keeping only its first ``n_layers`` decoder layers (early exit)."""
    small = copy.deepcopy(model)
    parent_name, _, name = layers_attr.rpartition(".")
    parent = small.get_submodule(parent_name) if parent_name else small
    setattr(parent, name, torch.nn.ModuleList(list(getattr(parent, name))[:n_layers]))
    parent.config.num_hidden_layers = n_layers
    small.config.num_hidden_layers = n_layers
    return small


def tiny_flat(seed: int = 0, n_layers: int = 2, hidden: int = 64, dtype=torch.float32, **layout_kw) -> HFCausalLM:
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
    delays: list[int] | None = None, min_frames: int = 0, dtype=torch.float32,
) -> CodecStepLM:
    config = CodecLMConfig(
        text_vocab_size=TEXT_VOCAB, n_codebooks=n_codebooks, codebook_size=codebook_size, delays=delays,
        min_frames=min_frames,
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
    return CodecStepLM(truncated_copy(target.model, n_layers, "backbone.layers"))
