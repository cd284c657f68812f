"""The target speaking prompts, the material of the recipes that learn from its own outputs (draft
heads, fine stages): plain decoding as one batch, with the voice's sampling and a seed per prompt."""

from __future__ import annotations

from dataclasses import replace

import torch

from voicespec.engine.config import DecodeConfig
from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.layout import Prompt
from voicespec.pipeline.synthesis import sentence_config
from voicespec.pipeline.voice import Voice


def speak(voice: Voice, prompts: list[Prompt], seeds: list[int], greedy: list[bool] | None = None) -> list[torch.Tensor]:
    """Each prompt's frames ``[K, n]``, decoded together (each as it would be alone), prompt ``i``
    with seed ``seeds[i]`` (greedily where ``greedy[i]``), its steps capped by its frame-aligned
    track (both recipes' targets have one) or else by the voice's runaway guard for its token count."""
    base = DecodeConfig(sampling=voice.sampling, gamma=0)
    argmax = replace(voice.sampling, temperature=0)
    configs = [replace(sentence_config(voice, base, 0, len(p.text), p), seed=s,
                       sampling=argmax if greedy and greedy[i] else voice.sampling)
               for i, (p, s) in enumerate(zip(prompts, seeds))]
    return SpecDecoder(voice.target).run_batch(prompts, configs)
