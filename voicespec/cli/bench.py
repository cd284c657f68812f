"""The ``voicespec bench`` command: arguments → :class:`BenchConfig` → :class:`Bench` → report.

Only argument handling lives here, so building the ``voicespec`` parser imports nothing heavy.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from voicespec.bench.config import BenchConfig, read_prompts
from voicespec.engine.tree_shapes import TreeSpec
from voicespec.cli.args import device_arg, dtype_arg, positive
from voicespec.options import DEVICE_HELP, DTYPE_HELP
from voicespec.threads import THREADS_HELP, use_threads


def _ints(value: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in value.replace(",", " ").split())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {value!r}") from None


def _trees(value: str) -> tuple[TreeSpec, ...]:
    from voicespec.options import parse_tree

    try:
        return tuple(parse_tree(t) for t in value.split(";") if t.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _budgets(value: str) -> tuple[tuple[int, int], ...]:
    """``"14:4,15:5"``: (nodes, depth) pairs, each at least 1, nodes at most 64."""
    try:
        pairs = tuple((int(n), int(d)) for n, d in (x.split(":") for x in value.replace(",", " ").split()))
    except ValueError:
        pairs = ()
    if not pairs or not all(1 <= n <= 64 and 1 <= d <= n for n, d in pairs):
        raise argparse.ArgumentTypeError(f"expected NODES:DEPTH pairs (1 <= DEPTH <= NODES <= 64), e.g. 14:4,15:5, got {value!r}")
    return pairs


def _names(value: str) -> tuple[str, ...]:
    return tuple(x for x in value.replace(",", " ").split())


def add_bench_args(p: argparse.ArgumentParser) -> None:
    """Options left unset keep the defaults of :class:`BenchConfig` (or of ``--quick``)."""
    p.add_argument("--voice", "--model", dest="voice",
                   help="voice folder or name under models/ (default: the default voice)")
    p.add_argument("--quick", action="store_true",
                   help="short run: 2 prompts, γ 2,4, one round, clients 1,2,4 (< 3 min on 2 cores)")
    p.add_argument("--prompts", type=Path,
                   help="text file, one prompt per line (default: samples/prompts.txt if present, else built-in)")
    p.add_argument("--drafters", type=_names, help="comma-separated drafters of the voice (default: ngram and every shipped one; "
                                                          "auto and early-exit-N when named)")
    p.add_argument("--gammas", type=_ints, help="fixed draft lengths to try, e.g. 1,2,4,8 ('auto' always runs)")
    p.add_argument("--modes", type=_names, help="greedy,sampling (default both)")
    p.add_argument("--repeats", type=int, help="interleaved rounds per prompt")
    p.add_argument("--warmup", type=int, help="warm-up runs per method")
    p.add_argument("--max-steps", type=int, help="decode steps per sentence at most")
    p.add_argument("--seed", type=int)
    p.add_argument("--concurrency", type=_ints, help="client counts for the server load test, e.g. 1,2,4 (0: skip it)")
    p.add_argument("--probe", type=_ints, help="client counts for the outside probe: voicespec serve in a process of "
                                               "its own, every client at once, two new sentences each (0: skip it; "
                                               "default 8,12,16,20,24,32, none with --quick)")
    p.add_argument("--probe-decoding-contexts", type=positive(int, "probe decoding contexts"),
                   help="the probed server's --max-decoding-contexts: newcomers past it wait for a place (default: no limit)")
    p.add_argument("--batch-sizes", type=_ints, help="session counts for the batched engine without sockets, e.g. 1,16,64 (0: skip it)")
    p.add_argument("--prebuffer-ms", type=float, help="audio the simulated player buffers before it starts (default 200)")
    p.add_argument("--latency-budget-ms", type=float, help="judge each method, load level and probe level: TTFA p95 within this and no underruns")
    p.add_argument("--threads", type=int, help=THREADS_HELP)
    p.add_argument("--device", type=device_arg, help=DEVICE_HELP)
    p.add_argument("--dtype", type=dtype_arg, help=DTYPE_HELP)
    p.add_argument("--trees", type=_trees, help="draft trees to try with each drafter that drafts them, "
                                               "children per depth or per node, ';'-separated: 2,1,1;3/2,1,0/1,1,1")
    p.add_argument("--lossy-top-k", type=int, help="also run each drafter with LOSSY top-k acceptance "
                                                   "(labelled lossy in every table; 0/unset: exact only)")
    p.add_argument("--no-peer", dest="peer", action="store_false", default=None, help="skip the transformers peers")
    p.add_argument("--no-plots", dest="plots", action="store_false", default=None, help="skip the PNG plots")
    p.add_argument("--out", type=Path, default=Path("out/bench"), help="folder for bench.json, report.md and PNGs")
    p.add_argument("--cluster", action="store_true",
                   help="instead: local vs Ray Data synthesis and the plain server vs the Ray Serve ingress (the "
                        "`cluster` extra); writes cluster.json and cluster.md")
    p.add_argument("--fit-tree", type=_budgets, metavar="NODES:DEPTH,...",
                   help="instead: fit static draft trees to the feature drafter's measured greedy acceptance on the "
                        "prompts (half to fit, half to check) for each budget, beside --trees (default: the "
                        "drafter's own); writes tree_fit.json")
    p.add_argument("--cluster-items", type=int, default=16, help="--cluster: items for the synthesis comparison")
    p.add_argument("--cluster-workers", type=int, default=2, help="--cluster: Ray Data workers")


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    config = BenchConfig(voice=args.voice, prompts=read_prompts(args.prompts))
    if args.quick:
        config = config.quick()
    given = {k: getattr(args, k) for k in ("drafters", "gammas", "modes", "repeats", "warmup", "max_steps", "seed",
                                           "concurrency", "batch_sizes", "probe", "probe_decoding_contexts", "prebuffer_ms", "latency_budget_ms", "peer", "plots", "threads",
                                           "device", "dtype", "lossy_top_k", "trees")
             if getattr(args, k) is not None}
    for name in ("concurrency", "batch_sizes", "probe"):
        if given.get(name) == (0,):
            given[name] = ()
    return replace(config, **given)


def run_bench(args: argparse.Namespace) -> int:
    from voicespec.pipeline.voice import load_voice, resolve_voice
    from voicespec.bench import machine
    from voicespec.bench.harness import Bench
    from voicespec.bench.report import markdown, write_outputs

    config = config_from_args(args)
    use_threads(config.threads)
    if args.cluster:
        from voicespec.bench.cluster import markdown as cluster_markdown, run_cluster_bench
        from voicespec.bench.config import read_prompts

        result = run_cluster_bench(config.voice, read_prompts(args.prompts), args.out, args.cluster_items,
                                   args.cluster_workers, tuple(c for c in args.concurrency or (1, 8) if c) or (1, 8),
                                   config.max_steps)
        print(cluster_markdown(result))
        return 0
    if args.fit_tree:
        return _fit_trees(args, config)
    rss0 = machine.rss_mb()
    voice = load_voice(config.voice, config.device, config.dtype)
    result = Bench(config, voice, rss0).run()
    result["voice"]["path"] = str(resolve_voice(config.voice).resolve())
    paths = write_outputs(result, args.out, config.plots)
    print(markdown(result))
    print(f"wrote {', '.join(str(p) for p in paths)}")
    if result["mismatches"]:
        print(f"FAILED: {result['mismatches']} greedy run(s) differ from plain decoding", file=sys.stderr)
        return 1
    return 0




def _fit_trees(args: argparse.Namespace, config: BenchConfig) -> int:
    import json

    from voicespec.bench.tree_fit import fit_markdown, fit_voice
    from voicespec.engine.tree_shapes import DynamicTree
    from voicespec.pipeline.voice import load_voice

    voice = load_voice(config.voice, config.device, config.dtype)
    compare = [t for t in (args.trees or voice.drafter("feature").trees) if not isinstance(t, DynamicTree)]
    result = fit_voice(voice, config.prompts, args.fit_tree, compare, max_steps=config.max_steps)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tree_fit.json").write_text(json.dumps(result, indent=1))
    print(fit_markdown(result))
    return 0
