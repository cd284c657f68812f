"""The benchmark's runner: methods interleaved case by case after a warm-up, mismatches flagged,
and a deliberately slowed drafter that lowers the efficiency or the ideal speedup."""

from __future__ import annotations

import time

import pytest
import torch

from voicespec.bench.runner import Case, EngineMethod, Run, mismatches, run_interleaved
from voicespec.bench.summary import summarize
from voicespec.engine.config import SamplingConfig
from voicespec.engine.drafters import ModelDrafter
from voicespec.pipeline.tiny import flat_draft, tiny_flat

GREEDY = SamplingConfig(temperature=0)


class Recorder:
    """A fake method: records the order it is called in, returns fixed tokens."""

    kind, drafter_name, gamma, peer = "engine", "none", 0, None

    def __init__(self, name: str, log: list, tokens: list[int]) -> None:
        self.name, self.log, self.tokens = name, log, tokens

    def run(self, case, sampling, seed):
        self.log.append((self.name, case.name, seed))
        return Run(torch.tensor(self.tokens).unsqueeze(1), 0.01, 1)


def test_runner_interleaves_warms_up_and_flags_mismatches():
    log: list = []
    methods = [Recorder("a", log, [5, 6]), Recorder("b", log, [5, 6]), Recorder("c", log, [5, 7])]
    cases = [Case("x", None, 4), Case("y", None, 4)]
    runs = run_interleaved(methods, cases, GREEDY, repeats=2, warmup=1, seed=10)
    assert log[:3] == [("a", "x", 10), ("b", "x", 10), ("c", "x", 10)]  # warm-up, not recorded
    assert [(n, c) for n, c, _ in log[3:9]] == [("a", "x"), ("b", "x"), ("c", "x"), ("b", "y"), ("c", "y"), ("a", "y")]
    assert len(runs) == 12 and {s for _, c, s in log if c == "y"} == {11}  # one seed per case, whoever runs it
    assert mismatches(runs, "a") == {"a": 0, "b": 0, "c": 4}


class SlowDrafter:
    """Wraps a drafter with sleeps: in ``propose`` (a cost the ideal model sees, as draft time) and
    in ``rollback`` (bookkeeping outside draft and verify, which it cannot see)."""

    def __init__(self, inner, propose_s: float = 0.0, rollback_s: float = 0.0) -> None:
        self.inner, self.propose_s, self.rollback_s = inner, propose_s, rollback_s
        self.name, self.layout = inner.name, inner.layout

    def start(self, prompt):
        return SlowSession(self, self.inner.start(prompt))


class SlowSession:
    def __init__(self, drafter: SlowDrafter, inner) -> None:
        self.drafter, self.inner = drafter, inner

    def propose(self, ctx, gamma):
        time.sleep(self.drafter.propose_s)
        return self.inner.propose(ctx, gamma)

    def rollback(self, keep):
        time.sleep(self.drafter.rollback_s)
        self.inner.rollback(keep)

    def close(self):
        self.inner.close()


@pytest.mark.slow
def test_slowed_drafter_lowers_efficiency_or_ideal():
    target = tiny_flat(seed=3, min_frames=40)
    draft = ModelDrafter(flat_draft(target))
    methods = [
        EngineMethod("plain", target, None, 0),
        EngineMethod("fast", target, draft, 3, "draft-model"),
        EngineMethod("slow rollback", target, SlowDrafter(draft, rollback_s=0.03), 3, "draft-model"),
        EngineMethod("slow propose", target, SlowDrafter(draft, propose_s=0.03), 3, "draft-model"),
    ]
    cases = [Case(str(i), target.layout.prompt([3 + i, 9, 4]), 30) for i in range(2)]
    runs = run_interleaved(methods, cases, GREEDY, warmup=1)
    s = summarize(methods, runs, "plain", 50.0, greedy=True)
    fast, hidden, seen = s["fast"], s["slow rollback"], s["slow propose"]
    assert all(m.mismatches == 0 for m in s.values())
    assert fast.alpha == hidden.alpha == seen.alpha  # same tokens, same acceptance
    # Time the model cannot see (rollback) leaves the ideal alone and sinks the efficiency ...
    assert hidden.efficiency < 0.6 * fast.efficiency
    # ... time it can (draft time) sinks the ideal speedup itself, along with the measured one.
    assert seen.ideal_speedup < 0.6 * fast.ideal_speedup
    assert seen.speedup["median"] < 0.6 * fast.speedup["median"]
