"""What a bench run does, as one frozen dataclass written verbatim into the JSON report."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from voicespec.engine.tree_shapes import TreeSpec, check_tree
from voicespec.options import check_device, check_dtype
from voicespec.threads import DEFAULT_THREADS
from voicespec.paths import SAMPLES_DIR

BUILTIN_PROMPTS = (
    "Speculative decoding keeps every token exact.",
    "The quick brown fox jumps over the lazy dog. It was not amused.",
    "Hello there! How are you doing today?",
    "Please call Stella and ask her to bring these things with her from the store.",
)
DEFAULT_PROMPTS_FILE = SAMPLES_DIR / "prompts.txt"


@dataclass(frozen=True)
class BenchConfig:
    """Every knob of a run. ``gammas``: fixed draft lengths tried per drafter (``auto`` always
    runs too); ``repeats``: interleaved rounds per prompt; ``concurrency``: client counts for the
    load test (empty: skip it); ``latency_budget_ms``: TTFA budget the pass/fail table, the load
    test's capacity and the probe's clean count check."""

    voice: str | None = None
    prompts: tuple[str, ...] = BUILTIN_PROMPTS
    drafters: tuple[str, ...] | None = None  # None: every drafter the voice has
    gammas: tuple[int, ...] = (1, 2, 4, 8)
    modes: tuple[str, ...] = ("greedy", "sampling")
    repeats: int = 3
    warmup: int = 1
    max_steps: int = 2000  # per sentence; the voice's runaway guard also applies
    seed: int = 0
    peer: bool = True
    prebuffer_ms: float = 200.0
    concurrency: tuple[int, ...] = (1, 4, 8, 12, 16, 24)
    batch_sizes: tuple[int, ...] = (1, 4, 16, 64)  # sessions on the batched engine, no sockets (bench/batching.py)
    probe: tuple[int, ...] = (8, 12, 16, 20, 24, 32)  # clients of the outside probe: voicespec serve in its own process (bench/probe.py)
    probe_decoding_contexts: int | None = None  # the probed server's --max-decoding-contexts (None: its default)
    latency_budget_ms: float | None = None
    plots: bool = True
    # torch intra-op threads, as say, synth and serve run (voicespec.threads; 0: torch's default,
    # one per core). A verify pass's matrix products do gain from a second core on a quiet machine
    # (README, "Drafters"), so speculation measures higher at 0 or 2 on 2 cores.
    threads: int = DEFAULT_THREADS
    device: str = "auto"  # where the voice runs (options.DEVICE_HELP)
    dtype: str = "float32"
    lossy_top_k: int = 0  # > 0: also each drafter at γ=auto with LOSSY top-k acceptance (SamplingConfig.lossy_top_k)
    trees: tuple[TreeSpec, ...] = ()  # draft trees tried with each drafter that drafts them (dynamic: greedy only)

    def __post_init__(self) -> None:
        if not self.prompts:
            raise ValueError("no prompts to benchmark")
        if not self.gammas or any(g < 1 for g in self.gammas):
            raise ValueError(f"give fixed gammas >= 1 (plain decoding and auto always run), got {self.gammas}")
        if unknown := set(self.modes) - {"greedy", "sampling"}:
            raise ValueError(f"unknown modes {sorted(unknown)} (greedy, sampling)")
        if self.repeats < 1 or self.warmup < 0 or self.max_steps < 1:
            raise ValueError("repeats and max_steps must be >= 1, warmup >= 0")
        if any(n < 1 for n in (*self.concurrency, *self.batch_sizes, *self.probe)):
            raise ValueError(f"client and session counts must be >= 1, got {self.concurrency}, {self.batch_sizes} "
                             f"and {self.probe}")
        if self.probe_decoding_contexts is not None and self.probe_decoding_contexts < 1:
            raise ValueError(f"probe_decoding_contexts must be >= 1, got {self.probe_decoding_contexts}")
        if self.prebuffer_ms < 0 or self.threads < 0 or self.lossy_top_k < 0:
            raise ValueError("prebuffer_ms, threads and lossy_top_k must be >= 0")
        for tree in self.trees:
            check_tree(tree)
        check_device(self.device)
        check_dtype(self.dtype)

    def quick(self) -> BenchConfig:
        """The short run (< 3 minutes on 2 CPU cores): two prompts, two γ, one round, capped length.
        Options given explicitly on the command line are applied after this."""
        return replace(self, prompts=self.prompts[:2], gammas=(2, 4), repeats=1, max_steps=min(self.max_steps, 150),
                       concurrency=(1, 4, 8), batch_sizes=(1, 16), probe=())


def read_prompts(path: Path | None) -> tuple[str, ...]:
    """One prompt per line (blank lines and ``#`` comments skipped); no file: the built-in list."""
    if path is None:
        if not DEFAULT_PROMPTS_FILE.is_file():
            return BUILTIN_PROMPTS
        path = DEFAULT_PROMPTS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such prompts file")
    lines = [line.strip() for line in path.read_text().splitlines()]
    prompts = tuple(line for line in lines if line and not line.startswith("#"))
    if not prompts:
        raise ValueError(f"{path}: no prompts (one per line)")
    return prompts
