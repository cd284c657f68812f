"""The outside load probe (voicespec.bench.probe.run_probe) for several server settings or source
trees, alternated, so that a comparison shares the machine's mood.

    python scripts/probe_ab.py '{"prev": ["/tmp/before", []], "new": ["", ["--text-processes", "2"]]}' 3 12,16,16

Each variant is [PYTHONPATH for the server ("" for this checkout), extra `voicespec serve` flags];
then rounds and client counts. Prints, per round and variant, (clients, clean clients, TTFA p50,
TTFA p95 in ms, summed stall in ms) for every level. Run it from outside a checkout's folder.
"""

from __future__ import annotations

import json
import os
import sys

from voicespec.bench.probe import run_probe


def main() -> None:
    variants = json.loads(sys.argv[1])
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    levels = [int(x) for x in (sys.argv[3] if len(sys.argv) > 3 else "16,16,16").split(",")]
    for r in range(rounds):
        for name, (path, args) in variants.items():
            os.environ["PYTHONPATH"] = path
            result = run_probe(levels, args, seed=r)
            row = [(lv["clients"], lv["clients"] - lv["clients_with_underruns"] - len(lv["errors"]),
                    round(lv["ttfa_ms"]["p50"]), round(lv["ttfa_ms"]["p95"]), round(lv["stall_ms"]))
                   for lv in result["levels"]]
            print(r, name, row, flush=True)


if __name__ == "__main__":
    main()
