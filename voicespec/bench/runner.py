"""Interleaved A/B decoding: every method on the same prompt back to back, round after round.

Running A B C, A B C, ... (rotating who goes first) means slow drifts of the machine — thermal
throttling, a neighbour's job — hit every method alike, and each method's speed can be compared
with the baseline's *pair by pair*. Only verified steps are compared, so greedy runs can be
checked token for token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol

import torch

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.tree_shapes import DynamicTree, TreeSpec

from voicespec.engine.decoder import SpecDecoder
from voicespec.engine.drafters import Drafter
from voicespec.engine.layout import Prompt
from voicespec.engine.step_lm import StepLM
from voicespec.engine.stats import DecodeStats
from voicespec.frame_blocks import FrameBlocks


@dataclass(frozen=True)
class Case:
    """One prompt to decode (a sentence) and its step cap."""

    name: str
    prompt: Prompt
    max_steps: int


@dataclass
class Run:
    """One decode: the generated steps ``[n, G]`` and what it cost. ``stats`` and ``trace`` (per
    verify pass: steps drafted, steps accepted) exist for engine runs only; ``codes`` (the frames
    ``[K, T]``) for a layout with a fine stage, whose steps hold codebook 0 only."""

    tokens: torch.Tensor
    wall_s: float
    frames: int
    stats: DecodeStats | None = None
    trace: list[tuple[int, int]] = field(default_factory=list)
    method: str = ""
    case: int = -1
    round: int = -1
    codes: torch.Tensor | None = None

    @property
    def output(self) -> torch.Tensor:
        """What must equal the baseline's: the frames where steps do not determine them."""
        return self.tokens if self.codes is None else self.codes

    @property
    def steps(self) -> int:
        return self.tokens.shape[0]

    @property
    def rate(self) -> float:
        """Steps per wall second, prefill included (what a caller waits for)."""
        return self.steps / self.wall_s


class Method(Protocol):
    """A way of decoding a case. ``peer``: the name of the method it is compared against."""

    name: str
    kind: str
    drafter_name: str
    gamma: int | str | None
    peer: str | None

    def run(self, case: Case, sampling: SamplingConfig, seed: int) -> Run: ...


@dataclass
class EngineMethod:
    """Our decoder with one drafter at one γ (γ = 0 or no drafter: plain decoding)."""

    name: str
    target: StepLM
    drafter: Drafter | None
    gamma: int | str
    drafter_name: str = "none"
    peer: str | None = None
    kind: str = "engine"
    lossy_top_k: int = 0  # > 0: LOSSY top-k acceptance (never in the exact methods)
    tree: TreeSpec | None = None  # a draft tree every step (static, or dynamic: greedy only)
    fine_blocks: FrameBlocks | None = None  # when a fine stage completes frames (SpecDecoder)

    def __post_init__(self) -> None:
        self.decoder = SpecDecoder(self.target, self.drafter, fine_blocks=self.fine_blocks)

    @property
    def greedy_only(self) -> bool:
        """A dynamic tree is exact in greedy decoding only: it sits out the sampling runs."""
        return isinstance(self.tree, DynamicTree)

    def run(self, case: Case, sampling: SamplingConfig, seed: int) -> Run:
        sampling = replace(sampling, lossy_top_k=self.lossy_top_k)
        config = DecodeConfig(sampling, gamma=self.gamma, max_steps=case.max_steps, seed=seed, tree=self.tree)
        t0 = time.perf_counter()
        gen = self.decoder.generate(case.prompt, config)
        s, trace, frames = gen.stats, [], []
        while not gen.done:
            drafted, accepted = s.drafted, s.accepted
            frames.append(gen.step().frames)
            trace.append((s.drafted - drafted, s.accepted - accepted))
        wall = time.perf_counter() - t0
        codes = torch.cat(frames, 1) if gen.layout.fine else None
        return Run(gen.generated.clone(), wall, s.frames, s, trace, codes=codes)


def run_interleaved(
    methods: Sequence[Method], cases: Sequence[Case], sampling: SamplingConfig, repeats: int = 1, warmup: int = 1,
    seed: int = 0, progress: Callable[[str], None] | None = None,
) -> list[Run]:
    """Warm every method up on the first case, then run all methods on each case in turn,
    ``repeats`` rounds. Case ``i`` is decoded with seed ``seed + i`` by every method."""
    for _ in range(warmup):
        for m in methods:
            m.run(cases[0], sampling, seed)
    runs: list[Run] = []
    for r in range(repeats):
        for i, case in enumerate(cases):
            k = (r * len(cases) + i) % len(methods)
            for m in [*methods[k:], *methods[:k]]:
                runs.append(replace(m.run(case, sampling, seed + i), method=m.name, case=i, round=r))
            if progress:
                progress(f"round {r + 1}/{repeats} case {i + 1}/{len(cases)}")
    return runs


def mismatches(runs: Sequence[Run], baseline: str) -> dict[str, int]:
    """Per method, how many runs' verified steps differ from the baseline's on the same case and
    round (the engine's contract: greedy speculation changes no verified token)."""
    ref = {(r.case, r.round): r.tokens for r in runs if r.method == baseline}
    out: dict[str, int] = {}
    for r in runs:
        out[r.method] = out.get(r.method, 0) + (not torch.equal(r.tokens, ref[r.case, r.round]))
    return out


def fine_ties(runs: Sequence[Run], baseline: str) -> dict[str, int]:
    """Per method, runs whose verified steps equal the baseline's but whose frames do not: a
    coarse-first fine stage took a different argmax at a float near-tie. Its input hidden states
    come from verify passes of another shape (γ + 1 positions instead of 1), which rounds
    differently (|Δlogit| ~ 1e-6); the bench counts these apart from mismatches."""
    ref = {(r.case, r.round): r for r in runs if r.method == baseline}
    out: dict[str, int] = {}
    for r in runs:
        base = ref[r.case, r.round]
        tie = torch.equal(r.tokens, base.tokens) and not torch.equal(r.output, base.output)
        out[r.method] = out.get(r.method, 0) + tie
    return out
