"""``voicespec bench``: the pure math (ideal speedup, percentiles, pairwise ratios, budget), the
interleaved runner, a deliberately slowed drafter, and one end-to-end run on a tiny flat voice."""

from __future__ import annotations

import json
import time
from dataclasses import fields

import pytest
import torch

from voicespec.bench.budget import budget_table, capacity, judge
from voicespec.bench.cli import add_bench_args, config_from_args
from voicespec.bench.config import BUILTIN_PROMPTS, BenchConfig, read_prompts
from voicespec.bench.dist import percentiles, ratio_summary
from voicespec.bench.ideal import alpha_from_trace, efficiency, expected_tokens, ideal_speedup
from voicespec.bench.load import LoadLevel
from voicespec.bench.runner import Case, EngineMethod, Run, mismatches, run_interleaved
from voicespec.bench.summary import MethodSummary, summarize
from voicespec.cli import Parser, main
from voicespec.bench.playout import playout, playout_timeline
from voicespec.engine.drafters import ModelDrafter
from voicespec.engine.config import SamplingConfig
from voicespec.pipeline.tiny import build_tiny_voice, flat_draft, tiny_flat

GREEDY = SamplingConfig(temperature=0)


# ----------------------------------------------------------------------------- ideal speedup


def test_expected_tokens_closed_form():
    assert expected_tokens(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2) == pytest.approx(3.3616)
    assert expected_tokens(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens(1.0, 4) == 5.0  # the limit: every draft accepted, plus the bonus step
    assert expected_tokens(0.0, 4) == expected_tokens(None, 4) == expected_tokens(0.9, 0) == 1.0


def test_alpha_is_accepted_over_tried_positions():
    # 5 accepted steps; the (4, 1) and (2, 0) drafts were each cut by one rejection; the full
    # (4, 4) draft and the empty one had none.
    assert alpha_from_trace([(4, 4), (4, 1), (0, 0), (2, 0)]) == pytest.approx(5 / 7)
    assert alpha_from_trace([(3, 3), (3, 3)]) == 1.0
    assert alpha_from_trace([(0, 0), (0, 0)]) is None


def test_ideal_speedup_fixed_gamma_is_leviathans_formula():
    # α = 0.8, γ = 4, c_draft = 0.1, c_verify(4) = 1.2, c_plain = 1: E = 3.3616 over a cost of
    # 4·0.1 + 1.2 = 1.6 → 2.101. Ten passes measured: 4 s drafting, 12 s verifying.
    assert ideal_speedup(0.8, [4] * 10, draft_s=4.0, verify_s=12.0, plain_pass_s=1.0) == pytest.approx(3.3616 / 1.6)
    # Leviathan's own example shape: c = c_draft / c_plain = 0.05, verify as cheap as a plain step.
    assert ideal_speedup(0.9, [3], draft_s=3 * 0.05, verify_s=1.0, plain_pass_s=1.0) == pytest.approx(3.439 / 1.15)


def test_ideal_speedup_with_varying_gamma_and_plain():
    # One empty draft (E = 1) and one of 2 at α = 0.5 (E = 1.75); 0.5 s drafting + 2 s verifying.
    assert ideal_speedup(0.5, [0, 2], draft_s=0.5, verify_s=2.0, plain_pass_s=1.0) == pytest.approx(2.75 / 2.5)
    # Plain decoding measured against its own pass cost is exactly 1.
    assert ideal_speedup(None, [0] * 5, draft_s=0.0, verify_s=0.5, plain_pass_s=0.1) == pytest.approx(1.0)
    assert efficiency(1.5, 2.0) == 0.75
    with pytest.raises(ValueError):
        ideal_speedup(0.5, [], 0.0, 0.0, 1.0)


# ----------------------------------------------------------------------------- distributions


def test_percentiles_and_pairwise_ratios():
    p = percentiles(list(range(1, 101)))
    assert p["p50"] == pytest.approx(50.5) and p["p95"] == pytest.approx(95.05) and p["p99"] == pytest.approx(99.01)
    assert percentiles([]) == {"p50": None, "p95": None, "p99": None}
    assert ratio_summary([1.2, 0.8, 1.0, 3.0]) == {"median": 1.1, "min": 0.8, "max": 3.0, "pairs": 4}
    assert ratio_summary([])["median"] is None


def test_playout_timeline_agrees_with_playout():
    sr = 1000  # 100 ms chunks; the 4th arrives 100 ms after the player ran dry (at 0.35 s)
    arrivals = [(0.0, 100), (0.05, 100), (0.1, 100), (0.45, 100), (0.5, 100)]
    lead = playout_timeline(arrivals, sr, prebuffer_s=0.2)
    play = playout(arrivals, sr, 0.2)
    assert [p.t for p in lead] == [0.1, 0.45, 0.5]  # playback started at the second arrival
    assert lead[0].lead_s == pytest.approx(0.15) and lead[1].lead_s == pytest.approx(-0.10)
    assert [p.stalled for p in lead] == [False, True, False]
    assert sum(p.stalled for p in lead) == play["underruns"] == 1
    assert -lead[1].lead_s == pytest.approx(play["stall_s"])


# ----------------------------------------------------------------------------- budget


def test_budget_verdicts():
    assert judge("a", 120.0, 0, 150.0).passed
    slow = judge("b", 180.0, 0, 150.0)
    assert not slow.passed and "TTFA p95 180 ms > 150 ms" in slow.reason
    both = judge("c", 180.0, 2, 150.0)
    assert not both.passed and "2 underruns" in both.reason and "TTFA" in both.reason
    assert judge("d", 900.0, 0, None).passed  # no budget: underruns only
    assert not judge("e", None, 0, 150.0).passed  # no audio at all
    table = budget_table({"x": {"ttfa_ms": {"p95": 100.0}, "underruns": 0},
                          "y": {"ttfa_ms": {"p95": 100.0}, "underruns": 1}}, 150.0)
    assert [(v.method, v.passed) for v in table] == [("x", True), ("y", False)]


def _level(n: int, p95: float, underruns: int = 0, errors: tuple[str, ...] = ()) -> dict:
    return LoadLevel("m", n, {"p50": p95, "p95": p95, "p99": p95}, underruns, int(underruns > 0), 0.0, None,
                     {"p50": 0.5, "p95": 0.5, "p99": 0.5}, list(errors)).to_dict()


def test_capacity_is_the_last_level_of_an_unbroken_run_of_passes():
    levels = [_level(4, 90, underruns=3), _level(1, 50), _level(2, 80), _level(8, 60)]
    assert capacity(levels, None) == 2  # 8 passing after 4 failed does not count
    assert capacity(levels, 70.0) == 1  # the budget cuts at 2 clients
    assert capacity([_level(1, 50, errors=("ConnectionError",))], None) == 0
    assert capacity([], None) == 0


# ----------------------------------------------------------------------------- config


def test_prompts_file_and_config_from_args(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("# a comment\nFirst prompt.\n\n  Second one.  \n")
    assert read_prompts(f) == ("First prompt.", "Second one.")
    assert read_prompts(None)  # samples/prompts.txt or the built-in list
    with pytest.raises(FileNotFoundError):
        read_prompts(tmp_path / "missing.txt")
    p = Parser()
    add_bench_args(p)
    quick = config_from_args(p.parse_args(["--quick", "--gammas", "1,3", "--concurrency", "0", "--prompts", str(f)]))
    assert quick.gammas == (1, 3) and quick.repeats == 1 and quick.concurrency == () and quick.prompts == read_prompts(f)
    assert config_from_args(p.parse_args(["--no-peer"])).peer is False
    with pytest.raises(ValueError):
        BenchConfig(gammas=(0, 2))
    assert BenchConfig(prompts=BUILTIN_PROMPTS).quick().prompts == BUILTIN_PROMPTS[:2]


# ----------------------------------------------------------------------------- runner


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


# ----------------------------------------------------------------------------- end to end


@pytest.fixture(scope="module")
def flat_voice_dir(tmp_path_factory):
    return build_tiny_voice(tmp_path_factory.mktemp("bench") / "flat", layout="flat")


def test_bench_end_to_end_on_a_tiny_flat_voice(flat_voice_dir, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello there.\n")
    out = tmp_path / "out"
    code = main(["bench", "--voice", str(flat_voice_dir), "--prompts", str(prompts), "--gammas", "2", "--repeats", "1",
                 "--max-steps", "24", "--concurrency", "1,2", "--latency-budget-ms", "5000", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "## Decoding — greedy" in printed and "## Latency budget" in printed
    result = json.loads((out / "bench.json").read_text())
    assert set(result) == {"config", "environment", "voice", "baseline", "decode", "streaming", "load", "memory",
                           "budget", "mismatches", "wall_s"}
    assert result["config"]["gammas"] == [2] and result["config"]["max_steps"] == 24
    assert result["environment"]["packages"]["torch"] and result["voice"]["path"] == str(flat_voice_dir.resolve())
    assert result["mismatches"] == 0

    greedy = result["decode"]["modes"]["greedy"]["methods"]
    want = {"plain", "ngram γ=2", "ngram γ=auto", "draft-model γ=2", "draft-model γ=auto",
            "hf generate", "hf assisted (draft-model)", "hf prompt-lookup (k=2)"}
    assert set(greedy) == want
    method_fields = {f.name for f in fields(MethodSummary)}
    for m in [*greedy.values(), *result["decode"]["modes"]["sampling"]["methods"].values()]:
        assert set(m) == method_fields
    assert all(m["mismatches"] == 0 for m in greedy.values())
    assert greedy["plain"]["peer"] == "hf generate" and greedy["draft-model γ=2"]["peer"] == "hf assisted (draft-model)"
    assert greedy["ngram γ=2"]["speedup_vs_peer"]["pairs"] == 1
    dm = greedy["draft-model γ=2"]
    assert dm["ideal_speedup"] > 0 and dm["efficiency"] > 0 and 0 <= dm["alpha"] <= 1
    assert len(dm["per_position_acceptance"]) == 2 and set(dm["time_s"]) == {"prefill", "draft", "verify", "other"}
    assert set(result["decode"]["modes"]["sampling"]["methods"]) == want - {m for m in want if m.startswith("hf")}

    streaming = result["streaming"]["methods"]
    assert set(streaming) == want - {m for m in want if m.startswith("hf")}
    for s in streaming.values():
        assert set(s) == {"runs", "ttfa_ms", "rtf", "gap_ms", "chunks", "audio_s", "underruns", "runs_with_underruns",
                          "stall_ms", "worst_lead_ms"}
        assert s["ttfa_ms"]["p50"] > 0 and s["audio_s"] > 0
    run = result["streaming"]["runs"][0]
    assert run["arrivals"] and set(run["playout"]) >= {"underruns", "stall_s", "min_lead_s"}

    load = result["load"]
    assert [(lv["method"], lv["clients"]) for lv in load["levels"]] == [
        ("plain", 1), ("plain", 2), ("ngram γ=auto", 1), ("ngram γ=auto", 2), ("draft-model γ=auto", 1), ("draft-model γ=auto", 2)]
    assert all(not lv["errors"] and lv["ttfa_ms"]["p50"] > 0 for lv in load["levels"])
    assert set(load["capacity"]) == {"plain", "ngram γ=auto", "draft-model γ=auto"}

    assert result["memory"]["peak_rss_mb"] > 0 and set(result["memory"]["drafters"]) == {"ngram", "draft-model"}
    assert result["memory"]["drafters"]["draft-model"]["weights_mb"] > 0 == result["memory"]["drafters"]["ngram"]["weights_mb"]
    assert len(result["budget"]["verdicts"]) == len(streaming) and result["budget"]["budget_ms"] == 5000

    names = {p.name for p in out.iterdir()}
    assert {"bench.json", "report.md", "speedup_vs_gamma.png", "acceptance_per_position.png", "ttfa.png",
            "audio_lead.png", "concurrency.png"} <= names
    assert "![ttfa](ttfa.png)" in (out / "report.md").read_text()
