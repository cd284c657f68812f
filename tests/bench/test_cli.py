"""``voicespec bench`` from its command line: prompts files and options, and one end-to-end run on a
tiny flat voice (every section of bench.json, the report and its plots)."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from voicespec.cli.bench import add_bench_args, config_from_args
from voicespec.bench.config import BUILTIN_PROMPTS, BenchConfig, read_prompts
from voicespec.bench.summary import MethodSummary
from voicespec.cli import Parser, main
from voicespec.pipeline.tiny import build_tiny_voice


def test_prompts_file_and_config_from_args(tmp_path):
    f = tmp_path / "prompts.txt"
    f.write_text("# a comment\nFirst prompt.\n\n  Second one.  \n")
    assert read_prompts(f) == ("First prompt.", "Second one.")
    assert read_prompts(None)  # samples/prompts.txt or the built-in list
    with pytest.raises(FileNotFoundError):
        read_prompts(tmp_path / "missing.txt")
    p = Parser()
    add_bench_args(p)
    quick = config_from_args(p.parse_args(["--quick", "--gammas", "1,3", "--concurrency", "0", "--batch-sizes", "0",
                                           "--prompts", str(f)]))
    assert quick.gammas == (1, 3) and quick.repeats == 1 and quick.concurrency == () and quick.prompts == read_prompts(f)
    assert quick.batch_sizes == () and quick.probe == ()
    assert config_from_args(p.parse_args(["--probe", "4,8"])).probe == (4, 8)
    assert config_from_args(p.parse_args(["--probe", "0"])).probe == ()
    assert config_from_args(p.parse_args(["--no-peer"])).peer is False
    with pytest.raises(ValueError):
        BenchConfig(gammas=(0, 2))
    assert BenchConfig(prompts=BUILTIN_PROMPTS).quick().prompts == BUILTIN_PROMPTS[:2]


@pytest.fixture(scope="module")
def flat_voice_dir(tmp_path_factory):
    return build_tiny_voice(tmp_path_factory.mktemp("bench") / "flat", layout="flat")


@pytest.mark.slow
def test_bench_end_to_end_on_a_tiny_flat_voice(flat_voice_dir, tmp_path, capsys):
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello there.\n")
    out = tmp_path / "out"
    code = main(["bench", "--voice", str(flat_voice_dir), "--prompts", str(prompts), "--gammas", "2", "--repeats", "1",
                 "--max-steps", "24", "--concurrency", "1,2", "--batch-sizes", "1,3", "--probe", "2", "--latency-budget-ms", "5000", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "## Decoding — greedy" in printed and "## Latency budget" in printed
    result = json.loads((out / "bench.json").read_text())
    assert set(result) == {"config", "environment", "voice", "baseline", "decode", "streaming", "batching", "load",
                           "probe", "memory", "budget", "mismatches", "wall_s"}
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
    assert dm["ideal_speedup"] > 0 and dm["efficiency"] > 0 and 0 < dm["alpha"] <= 1
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

    batching = result["batching"]
    assert [lv["sessions"] for lv in batching] == [1, 3] and all(lv["errors"] == 0 for lv in batching)
    assert batching[0]["mean_batch"] == 1 and 1 < batching[1]["mean_batch"] <= 3 and batching[1]["audio_x_realtime"] > 0
    assert "## Batched engine" in printed

    load = result["load"]
    assert [(lv["method"], lv["clients"]) for lv in load["levels"]] == [
        ("plain", 1), ("plain", 2), ("ngram γ=auto", 1), ("ngram γ=auto", 2), ("draft-model γ=auto", 1), ("draft-model γ=auto", 2)]
    assert all(not lv["errors"] and lv["ttfa_ms"]["p50"] > 0 for lv in load["levels"])
    assert set(load["capacity"]) == {"plain", "ngram γ=auto", "draft-model γ=auto"}
    fc = load["frame_cache"]
    assert fc["hit_equals_miss"] and fc["repeats"] == 3 and fc["hit_ttfa_ms"] > 0 and fc["miss_ttfa_ms"] > 0
    assert fc["cache_hits"] == fc["cache_misses"] == 3  # one sentence, three seeds
    assert "A repeated sentence (frame cache)" in printed

    probe = result["probe"]  # voicespec serve in a process of its own, on this voice
    assert probe["server_args"][:2] == ["--max-sessions", "2"] and str(flat_voice_dir) in probe["server_args"]
    assert [lv["clients"] for lv in probe["levels"]] == [2] and not probe["levels"][0]["errors"]
    assert probe["levels"][0]["ttfa_ms"]["p50"] > 0 and "## Outside probe" in printed

    assert result["memory"]["peak_rss_mb"] > 0 and set(result["memory"]["drafters"]) == {"ngram", "draft-model"}
    assert result["memory"]["drafters"]["draft-model"]["weights_mb"] > 0 == result["memory"]["drafters"]["ngram"]["weights_mb"]
    assert len(result["budget"]["verdicts"]) == len(streaming) and result["budget"]["budget_ms"] == 5000

    names = {p.name for p in out.iterdir()}
    assert {"bench.json", "report.md", "speedup_vs_gamma.png", "acceptance_per_position.png", "ttfa.png",
            "audio_lead.png", "concurrency.png"} <= names
    assert "![ttfa](ttfa.png)" in (out / "report.md").read_text()



@pytest.mark.slow
def test_stress_command_runs_each_phase_and_finds_nothing_left(tmp_path, capsys):
    from voicespec.pipeline.tiny import build_tiny_voice as build

    voice = build(tmp_path / "v")
    out = tmp_path / "stress.json"
    code = main(["stress", "--voice", str(voice), "--messages", "3000", "--sockets", "3", "--disconnects", "20",
                 "--flood-s", "1.5", "--flood-sockets", "3", "--out", str(out)])
    printed = capsys.readouterr().out
    report = json.loads(out.read_text())
    assert [p["phase"] for p in report["phases"]] == ["fuzz", "disconnects", "cpu", "contexts"]
    assert "| fuzz |" in printed and "/healthz p99 ms" in printed
    for p in report["phases"]:
        assert p["tracebacks"] == 0 and p["bad_closes"] == 0 and p["identical"] and p["good_runs"] >= 1, p
        assert p["healthz_p99_ms"] > 0 and 0 < p["good_ttfa_ms"] <= p["good_ttfa_p95_ms"]
        assert p["ttfa_samples"] >= p["good_runs"] and p["rows_left"] == 0 and p["contexts_left"] == 0
    assert code == 0


@pytest.mark.slow
def test_stress_runs_only_the_phases_asked_for(tmp_path, capsys):
    from voicespec.pipeline.tiny import build_tiny_voice as build

    assert main(["stress", "--phases", "fuzz,nope"]) == 2
    assert "phases must be some of fuzz, disconnects, cpu, contexts, soak" in capsys.readouterr().err
    out = tmp_path / "stress.json"
    assert main(["stress", "--voice", str(build(tmp_path / "v")), "--phases", "cpu", "--flood-s", "1",
                 "--out", str(out)]) == 0
    assert [p["phase"] for p in json.loads(out.read_text())["phases"]] == ["cpu"]
