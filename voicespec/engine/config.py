"""What a decode request is configured with: sampling and γ, as frozen dataclasses.

Standard library only: :mod:`voicespec.options` derives the CLI flags, the batch keys and the
protocol fields from these fields, and building a parser must not import torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from voicespec.checks import is_int
from voicespec.engine.controller import (
    AdaptiveGamma, Controller, ControllerConfig, ControllerMemory, FixedGamma, check_gamma,
)
from voicespec.engine.tree_shapes import DynamicTree, StaticTree, TreeSpec, check_tree


MIN_TEMPERATURE, MAX_TEMPERATURE = 1e-3, 100.0
MAX_TOP_K = 1 << 20
MAX_REPETITION_PENALTY = 100.0
MAX_REPETITION_WINDOW = 4096
COUPLINGS = ("invariant", "residual")
MAX_SEED = 2**53 - 1  # exact in every JSON reader; sentence i of a request uses seed + i


@dataclass(frozen=True)
class SamplingConfig:
    """How the next token is chosen. ``temperature == 0`` means greedy (argmax)."""

    temperature: float = field(default=1.0, metadata={"help": "0 means greedy (default: the voice's, else 1)"})
    top_k: int = field(default=0, metadata={"help": "keep the k most likely ids; 0 disables (default: the voice's)"})
    top_p: float = field(default=1.0, metadata={"help": "nucleus mass in (0, 1] (default: the voice's, else 1: off)"})
    repetition_penalty: float = field(default=1.0, metadata={"help": ">= 1; 1 is off (default: the voice's)"})
    repetition_window: int = field(default=0, metadata={"help": "steps the repetition penalty looks back"})
    coupling: str = field(default="invariant", metadata={
        "choices": COUPLINGS,
        "help": "how sampled drafts are checked, both exact: invariant (each position's token is the target's "
                "Gumbel-max draw with that position's own noise, so a seed gives the same tokens with speculation "
                "on or off, any gamma, tree, batch or machine) or residual (Leviathan et al.: accept with "
                "min(1, p/q), else redraw; a little more acceptance, tokens that depend on the drafts)"})
    lossy_top_k: int = field(default=0, metadata={
        "help": "LOSSY, off by default: accept a drafted token whenever it is among the target's N most likely "
                "(after warping) instead of by the exact rule; 0 keeps acceptance exact"})

    def __post_init__(self) -> None:
        # Finite ranges, so no accepted value can turn into NaN probabilities later.
        if not (self.temperature == 0 or MIN_TEMPERATURE <= self.temperature <= MAX_TEMPERATURE):
            raise ValueError(f"temperature must be 0 (greedy) or in [{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}], got {self.temperature}")
        if not 0 <= self.top_k <= MAX_TOP_K:
            raise ValueError(f"top_k must be in [0, {MAX_TOP_K}] (0 disables it), got {self.top_k}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 1 <= self.repetition_penalty <= MAX_REPETITION_PENALTY:
            raise ValueError(f"repetition_penalty must be in [1, {MAX_REPETITION_PENALTY:g}], got {self.repetition_penalty}")
        if self.coupling not in COUPLINGS:
            raise ValueError(f"coupling must be one of {', '.join(COUPLINGS)}, got {self.coupling!r}")
        if not 0 <= self.lossy_top_k <= MAX_TOP_K:
            raise ValueError(f"lossy_top_k must be in [0, {MAX_TOP_K}] (0: exact acceptance), got {self.lossy_top_k}")
        if not 0 <= self.repetition_window <= MAX_REPETITION_WINDOW:
            raise ValueError(f"repetition_window must be in [0, {MAX_REPETITION_WINDOW}], got {self.repetition_window}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def acceptance(self) -> str:
        """How drafts are accepted, as every report labels it: ``exact`` or ``lossy-top-N``."""
        return f"lossy-top-{self.lossy_top_k}" if self.lossy_top_k else "exact"

    @property
    def uses_history(self) -> bool:
        return self.repetition_penalty != 1 and self.repetition_window > 0


@dataclass(frozen=True)
class DecodeConfig:
    """``gamma``: draft length per step, or ``"auto"`` for the adaptive controller. ``tree``: a
    draft tree verified in one pass (:mod:`voicespec.engine.tree`) — a static one, children per
    depth (``(2, 2, 1)``) or per node (``((3,), (2, 1, 0))``), or a :class:`DynamicTree` (greedy
    only); with a tree every step drafts one, whatever ``gamma``."""

    sampling: SamplingConfig = field(default_factory=SamplingConfig)
    gamma: int | str = 4
    tree: TreeSpec | None = None
    max_steps: int = 2000
    seed: int | None = None
    controller: ControllerConfig = field(default_factory=ControllerConfig)

    def __post_init__(self) -> None:
        check_gamma(self.gamma)
        if self.tree is not None:
            object.__setattr__(self, "tree", check_tree(self.tree))
            if self.sampling.lossy_top_k:
                raise ValueError("LOSSY acceptance applies to chains of drafts, not to trees")
            if isinstance(self.tree, DynamicTree) and not self.sampling.greedy:
                raise ValueError("a dynamic tree takes the draft's top tokens, which is exact in greedy decoding "
                                 "only; sample with a static tree (e.g. 2,2,1) or a chain")
        if not (is_int(self.max_steps) and self.max_steps >= 1):
            raise ValueError(f"max_steps must be >= 1 (an integer), got {self.max_steps!r}")
        if self.seed is not None and not (is_int(self.seed) and 0 <= self.seed <= MAX_SEED):
            raise ValueError(f"seed must be an integer in [0, 2**53 - 1], got {self.seed!r}")

    def make_controller(self, memory: ControllerMemory | None = None, trees: Sequence[StaticTree] = ()) -> Controller:
        """γ's controller for one request; with ``memory``, an adaptive one starts from (and adds to)
        what earlier requests with this sampling setting measured. ``trees``: the drafter's
        candidate trees (none: it drafts no trees), which an adaptive controller weighs against
        chains (``controller.trees`` instead where set), unless this request fixed its own tree or
        accepts LOSSY, a rule for chains."""
        if self.gamma != "auto":
            return FixedGamma(int(self.gamma))
        return AdaptiveGamma(self.controller, estimates=None if memory is None else memory.estimates(self.sampling),
                             trees=() if self.tree is not None or self.sampling.lossy_top_k else trees)
