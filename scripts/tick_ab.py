"""ms a batched-engine tick at 1 and 16 sessions (voicespec.bench.batching.run_batching: plain,
the voice's sampling, 200 steps, 16 new probe sentences), one line per run. Compare trees by
alternating: ``for t in /tmp/before "$PWD"; do PYTHONPATH=$t python scripts/tick_ab.py; done``.
"""

from __future__ import annotations

import random
import sys

from voicespec.bench.batching import run_batching
from voicespec.bench.probe import fresh_texts
from voicespec.pipeline.voice import load_voice
from voicespec.threads import use_threads


def main() -> None:
    use_threads(1)
    voice = load_voice(sys.argv[1] if len(sys.argv) > 1 else None)
    levels = run_batching(voice, fresh_texts(16, random.Random(0), set()), [1, 16], max_steps=200)
    print(" ".join(f"{lv.sessions}: {lv.ms_per_tick:.2f} ms ({lv.audio_x_realtime:.1f}x RT)" for lv in levels))


if __name__ == "__main__":
    main()
