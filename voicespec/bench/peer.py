"""The ``transformers`` peers: ``generate()`` plain, with ``assistant_model`` (assisted generation)
and with ``prompt_lookup_num_tokens`` — on the same target and draft weights, greedy, under the
same layout masks (:class:`~voicespec.lm.hf.LayoutMaskProcessor`), so their tokens must equal ours.

Only flat layouts qualify: ``generate()`` knows one token per step, not codebook groups. Assisted
generation runs with the draft's own generation settings (transformers' defaults: its adaptive
number of assistant tokens), as a user calling it would get.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import PreTrainedModel

from voicespec.engine.drafters import Drafter, ModelDrafter, NGramDrafter
from voicespec.lm.hf import LayoutMaskProcessor
from voicespec.engine.layout import FlatLayout
from voicespec.engine.step_lm import StepLM
from voicespec.engine.config import SamplingConfig
from voicespec.bench.runner import Case, Run

PLAIN = "hf generate"


def assisted_name(drafter: str) -> str:
    return f"hf assisted ({drafter})"


def lookup_name(k: int) -> str:
    return f"hf prompt-lookup (k={k})"


@dataclass
class PeerMethod:
    """``model.generate(**options)`` on a case; greedy only (sampled tokens differ by design)."""

    name: str
    model: PreTrainedModel
    layout: FlatLayout
    options: dict[str, Any] = field(default_factory=dict)
    drafter_name: str = "none"
    gamma: int | str | None = None
    peer: str | None = None
    kind: str = "peer"

    @property
    def settings(self) -> dict[str, Any]:
        """The ``generate()`` options as JSON (a model given by its drafter name)."""
        return {k: v if isinstance(v, (int, float, str, bool)) else self.drafter_name for k, v in self.options.items()}

    @torch.inference_mode()
    def run(self, case: Case, sampling: SamplingConfig, seed: int) -> Run:
        if not sampling.greedy:
            raise ValueError(f"{self.name}: the transformers peer is compared greedy only")
        ids = case.prompt.steps.T
        lay = self.layout
        t0 = time.perf_counter()
        out = self.model.generate(
            ids, max_new_tokens=case.max_steps, do_sample=False, logits_processor=[LayoutMaskProcessor(lay, ids.shape[1])],
            eos_token_id=lay.eos_id, pad_token_id=lay.pad_id, **self.options,
        )
        wall = time.perf_counter() - t0
        tokens = out[0, ids.shape[1]:].unsqueeze(1)
        state = lay.initial_state()
        for step in tokens:
            state = lay.advance(state, step)
        return Run(tokens, wall, lay.complete_frames(state))


def peer_methods(target: StepLM, drafters: dict[str, Drafter], lookup_tokens: int) -> list[PeerMethod]:
    """The peers this target admits: none unless it is a ``transformers`` model in a flat layout;
    one assisted peer per draft model that is one too."""
    model = getattr(target, "model", None)
    if not isinstance(target.layout, FlatLayout) or not isinstance(model, PreTrainedModel):
        return []
    peers = [PeerMethod(PLAIN, model, target.layout)]
    for name, drafter in drafters.items():
        draft = getattr(getattr(drafter, "lm", None), "model", None) if isinstance(drafter, ModelDrafter) else None
        if isinstance(draft, PreTrainedModel):
            peers.append(PeerMethod(assisted_name(name), model, target.layout, {"assistant_model": draft}, name))
    peers.append(PeerMethod(lookup_name(lookup_tokens), model, target.layout,
                            {"prompt_lookup_num_tokens": lookup_tokens}, "ngram", lookup_tokens))
    return peers


def counterpart(drafter_name: str, drafter: Drafter | None, peers: list[PeerMethod]) -> str | None:
    """The peer an engine method is judged against: plain ``generate`` for plain decoding, the
    assisted peer with the same draft model, prompt lookup for the n-gram drafter."""
    if drafter is None:
        want: str | None = PLAIN
    elif isinstance(drafter, ModelDrafter):
        want = assisted_name(drafter_name)
    elif isinstance(drafter, NGramDrafter):
        want = next((p.name for p in peers if p.drafter_name == "ngram"), None)
    else:
        want = None
    return want if want in {p.name for p in peers} else None
