"""The bench itself: decode A/B in each mode, streaming, server load, memory, budget → one result dict."""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from typing import Any

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.engine.tree_shapes import DynamicTree, tree_text
from voicespec.engine.drafters import Drafter
from voicespec.pipeline.synthesis import sentence_config
from voicespec.pipeline.voice import Voice
from voicespec.bench import machine
from voicespec.bench.budget import budget_table, capacity
from voicespec.bench.config import BenchConfig
from voicespec.bench.batching import run_batching
from voicespec.bench.load import run_cache_hit, run_load
from voicespec.bench.probe import run_probe
from voicespec.bench.peer import counterpart, peer_methods
from voicespec.bench.runner import Case, EngineMethod, Method, run_interleaved
from voicespec.bench.streaming import StreamSpec, run_streaming, summarize_streams
from voicespec.bench.summary import summarize

BASELINE = "plain"


def _log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


class Bench:
    """One run of every phase on one voice; :meth:`run` returns the JSON-ready result."""

    def __init__(self, config: BenchConfig, voice: Voice, rss_before_voice_mb: float | None = None) -> None:
        self.config = config
        self.voice = voice
        rss = machine.rss_mb()
        self.memory: dict[str, Any] = {"voice_rss_mb": None if rss_before_voice_mb is None else rss - rss_before_voice_mb,
                                       "drafters": {}}
        # Default: n-gram and every shipped drafter; the composites (auto) and early exits on request.
        names = config.drafters or tuple(n for n in voice.drafter_names if n == "ngram" or n in voice.draft_dirs)
        self.drafters: dict[str, Drafter] = {}
        for name in names:  # loaded one by one, so each one's memory is measured alone
            before = machine.rss_mb()
            drafter = voice.drafter(name)
            if drafter is None:
                raise ValueError("'none' is the baseline, which always runs; name drafters only")
            self.drafters[name] = drafter
            model = getattr(getattr(drafter, "lm", None), "model", None)
            self.memory["drafters"][name] = {"rss_delta_mb": machine.rss_mb() - before,
                                             "weights_mb": machine.weights_mb(model)}
        self.cases = self._cases()
        wants_peer = config.peer and "greedy" in config.modes
        self.peers = peer_methods(voice.target, self.drafters, max(config.gammas)) if wants_peer else []

    def _cases(self) -> list[Case]:
        """Every sentence of every prompt, capped like synthesis caps it (the voice's runaway guard)."""
        voice, base = self.voice, DecodeConfig(max_steps=self.config.max_steps)
        cases = []
        for i, text in enumerate(self.config.prompts):
            for j, (sentence, ids) in enumerate(voice.frontend.sentences(text)):
                prompt = voice.prompt(ids)
                cases.append(Case(f"{i}.{j}", prompt, sentence_config(voice, base, j, len(sentence), prompt).max_steps))
        return cases

    def _engine_methods(self) -> list[EngineMethod]:
        target, blocks = self.voice.target, self.voice.frame_blocks  # the fine stage in the voice's blocks, as synthesis runs it
        methods = [EngineMethod(BASELINE, target, None, 0, peer=counterpart("none", None, self.peers), fine_blocks=blocks)]
        for name, drafter in self.drafters.items():
            peer = counterpart(name, drafter, self.peers)
            for gamma in (*self.config.gammas, "auto"):
                methods.append(EngineMethod(f"{name} γ={gamma}", target, drafter, gamma, name, peer, fine_blocks=blocks))
            if getattr(drafter, "drafts_trees", False):
                for tree in self.config.trees:
                    label = tree if isinstance(tree, DynamicTree) else tree_text(tree)
                    methods.append(EngineMethod(f"{name} tree={label}", target, drafter, "auto", name, None, tree=tree,
                                                fine_blocks=blocks))
            if k := self.config.lossy_top_k:
                methods.append(EngineMethod(f"{name} γ=auto LOSSY top-{k}", target, drafter, "auto", name, None,
                                            lossy_top_k=k, fine_blocks=blocks))
        return methods

    def _decode(self, engine: list[EngineMethod]) -> dict[str, Any]:
        cfg, frame_rate = self.config, self.voice.codec.frame_rate
        out: dict[str, Any] = {"peers": {p.name: p.settings for p in self.peers}, "modes": {}}
        for mode in cfg.modes:
            greedy = mode == "greedy"
            sampling = SamplingConfig(temperature=0) if greedy else self.voice.sampled  # sampling even for a greedy voice
            methods: list[Method] = [*(m for m in engine if greedy or not m.greedy_only), *(self.peers if greedy else [])]
            _log(f"decode {mode}: {len(methods)} methods x {len(self.cases)} sentences x {cfg.repeats} rounds")
            runs = run_interleaved(methods, self.cases, sampling, cfg.repeats, cfg.warmup, cfg.seed, _log)
            summary = summarize(methods, runs, BASELINE, frame_rate, greedy)
            out["modes"][mode] = {
                "sampling": asdict(sampling),
                "methods": {name: asdict(s) for name, s in summary.items()},
                "runs": [{"method": r.method, "case": self.cases[r.case].name, "round": r.round, "steps": r.steps,
                          "frames": r.frames, "wall_s": r.wall_s, "steps_per_s": r.rate} for r in runs],
            }
        return out

    def _streaming(self, engine: list[EngineMethod]) -> dict[str, Any]:
        cfg = self.config
        specs = [StreamSpec(m.name, m.drafter_name, m.gamma, m.tree) for m in engine
                 if not m.lossy_top_k and not m.greedy_only]
        _log(f"streaming: {len(specs)} methods x {len(cfg.prompts)} prompts x {cfg.repeats} rounds")
        runs = run_streaming(self.voice, specs, cfg.prompts, self.voice.sampling, cfg.max_steps, cfg.prebuffer_ms / 1000,
                             cfg.repeats, cfg.warmup, cfg.seed)
        return {"sampling": asdict(self.voice.sampling), "methods": summarize_streams(runs),
                "runs": [{"method": r.method, "prompt": r.prompt, "round": r.round, "ttfa_s": r.ttfa_s, "rtf": r.rtf,
                          "audio_s": r.audio_s, "wall_s": r.wall_s, "sample_rate": r.sample_rate, "arrivals": r.arrivals,
                          "playout": r.playout, "lead": r.lead} for r in runs]}

    def _load(self) -> dict[str, Any] | None:
        cfg = self.config
        if not cfg.concurrency:
            return None
        specs = [StreamSpec(BASELINE, "none", 0), *(StreamSpec(f"{n} γ=auto", n, "auto") for n in self.drafters)]
        _log(f"server load: {len(specs)} methods x clients {', '.join(map(str, cfg.concurrency))}")
        levels = [lv.to_dict() for lv in run_load(self.voice, specs, cfg.prompts, cfg.concurrency,
                                                   cfg.prebuffer_ms / 1000, cfg.max_steps, cfg.seed)]
        return {"levels": levels, "capacity": {s.name: capacity([lv for lv in levels if lv["method"] == s.name],
                                                                 cfg.latency_budget_ms) for s in specs},
                "frame_cache": run_cache_hit(self.voice, cfg.prompts[0], cfg.max_steps, cfg.seed)}

    def _probe(self) -> dict[str, Any] | None:
        cfg = self.config
        if not cfg.probe:
            return None
        _log(f"outside probe: voicespec serve in its own process, clients {', '.join(map(str, cfg.probe))}")
        server = [*(("--model", cfg.voice) if cfg.voice else ()), "--threads", str(cfg.threads),
                  "--device", cfg.device, "--dtype", cfg.dtype]
        if cfg.probe_decoding_contexts is not None:
            server += ["--max-decoding-contexts", str(cfg.probe_decoding_contexts)]
        return run_probe(cfg.probe, server, cfg.prebuffer_ms / 1000, cfg.seed, cfg.latency_budget_ms)

    def _batching(self) -> list[dict[str, Any]]:
        cfg = self.config
        if not cfg.batch_sizes:
            return []
        _log(f"batched engine: sessions {', '.join(map(str, cfg.batch_sizes))}")
        return [lv.to_dict() for lv in run_batching(self.voice, cfg.prompts, cfg.batch_sizes, cfg.max_steps, cfg.seed)]

    def run(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        engine = self._engine_methods()
        decode = self._decode(engine)
        streaming = self._streaming(engine)
        batching = self._batching()
        load = self._load()
        probe = self._probe()
        budget = budget_table(streaming["methods"], self.config.latency_budget_ms)
        self.memory["peak_rss_mb"] = machine.peak_rss_mb()
        voice = self.voice
        return {
            "config": asdict(self.config),
            "environment": machine.environment(),
            "voice": {"name": voice.name, "layout": voice.target.layout.kind, "frame_rate": voice.codec.frame_rate,
                      "sample_rate": voice.codec.sample_rate, "drafters": list(self.drafters),
                      "sentences": [c.name for c in self.cases], "max_steps": [c.max_steps for c in self.cases]},
            "baseline": BASELINE,
            "decode": decode,
            "streaming": streaming,
            "batching": batching,
            "load": load,
            "probe": probe,
            "memory": self.memory,
            "budget": {"budget_ms": self.config.latency_budget_ms, "verdicts": [asdict(v) for v in budget]},
            "mismatches": sum(s["mismatches"] or 0 for mode in decode["modes"].values() for s in mode["methods"].values()),
            "wall_s": time.perf_counter() - t0,
        }
