"""Where first audio goes when N clients start at once: the outside probe (one burst of N after its
warm-up) against a server that logs each text read, each batched call and each job's first audio,
then a quiet prefill of the same number of prompts in this process for scale. Run it alone on the
machine, from outside a checkout's folder:
``python scripts/burst_trace.py [--voice voicespec-tiny-g2] [--clients 16]``.

The server is patched through a ``sitecustomize`` module put first on its ``PYTHONPATH`` (it logs;
it changes nothing it wraps). Prints, in ms from the burst's first read: when each text's first
sentences were ready, each batched call that prefilled newcomers (prompts, ms), and each job's
first audio."""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from pathlib import Path

import voicespec
from voicespec.bench.probe import fresh_texts, run_probe
from voicespec.pipeline.voice import load_voice
from voicespec.threads import use_threads

HOOK = '''
import json, os, sys, threading, time
if "serve" in sys.argv and os.environ.get("VS_TRACE"):
    from voicespec.serve import scheduler as S, text_reader as TR
    out, lock, t0 = open(os.environ["VS_TRACE"], "a", buffering=1), threading.Lock(), time.perf_counter()
    def log(**k):
        with lock:
            out.write(json.dumps({**k, "t": (time.perf_counter() - t0) * 1e3}) + "\\n")
    run_works = S.run_works
    def works(ws):
        t = time.perf_counter(); r = run_works(ws)
        log(ev="works", prefills=sum(type(w).__name__ == "Prefill" for w in ws), ms=(time.perf_counter() - t) * 1e3)
        return r
    S.run_works = works
    deliver = S.DecodeWorker._deliver_audio
    def first(self, job, item):
        if job.t_first_audio is None:
            log(ev="first_audio")
        deliver(self, job, item)
    S.DecodeWorker._deliver_audio = first
    read = TR.TextReader.read
    async def timed_read(self, *a, **k):
        log(ev="read_start"); r = await read(self, *a, **k); log(ev="read_end"); return r
    TR.TextReader.read = timed_read
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--voice", default="voicespec-tiny-g2")
    ap.add_argument("--clients", type=int, default=16)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as hook:
        (Path(hook) / "sitecustomize.py").write_text(HOOK)
        trace = Path(hook) / "trace.jsonl"
        os.environ["PYTHONPATH"] = os.pathsep.join([hook, str(Path(voicespec.__file__).parents[1])])
        os.environ["VS_TRACE"] = str(trace)
        level = run_probe([args.clients], ["--voice", args.voice])["levels"][0]
        events = [json.loads(line) for line in trace.read_text().splitlines()]
    quiet = max(range(1, len(events)), key=lambda i: events[i]["t"] - events[i - 1]["t"])  # the warm-up has ended
    burst = events[quiet:]
    t0 = next(e["t"] for e in burst if e["ev"] == "read_start")
    reads = [round(e["t"] - t0) for e in burst if e["ev"] == "read_end"]
    print(f"{args.voice}, {args.clients} clients: {level['clients'] - level['clients_with_underruns']} clean, "
          f"TTFA p50/p95 {level['ttfa_ms']['p50']:.0f}/{level['ttfa_ms']['p95']:.0f} ms (clients' clock)")
    print("texts ready (ms):", reads[: args.clients])
    firsts = [round(e["t"] - t0) for e in burst if e["ev"] == "first_audio"]
    print("calls with prefills until the last first audio (ended at ms: prompts, ms of the call):",
          [(round(e["t"] - t0), e["prefills"], round(e["ms"])) for e in burst
           if e["ev"] == "works" and e["prefills"] and e["t"] - t0 <= firsts[-1]])
    print("first audio (ms):", firsts)
    use_threads(1)  # as the server runs it
    voice = load_voice(args.voice)
    texts = fresh_texts(args.clients, random.Random(9), set())
    prompts = [voice.prompt(voice.frontend.sentences(t)[0][1]) for t in texts]
    for n in (1, args.clients):
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            sessions = voice.target.start_batch(prompts[:n])
            best = min(best, time.perf_counter() - t)
            for s in sessions:
                s.close()
        print(f"quiet prefill, {n} prompt(s) in one call: {best * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
