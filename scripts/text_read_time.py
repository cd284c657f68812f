"""How long the server's text reader keeps a request waiting (serve/text_reader.py): one worker
process, the default voice, new sentences every time (a voice remembers durations it has seen).

Prints the wait of a 2- and a 40-sentence text (and, where the reader has them, how long its later
sentences' durations took after), then of a burst of 16 two-sentence texts read at once. Compare
two trees by running it under each: ``PYTHONPATH=/tmp/before python scripts/text_read_time.py``
(from outside either checkout's folder, or with both paths absolute).
"""

from __future__ import annotations

import asyncio
import random
import time

from voicespec.bench.probe import fresh_texts
from voicespec.pipeline.synthesis import SynthesisOptions
from voicespec.pipeline.voice import Voice, load_voice
from voicespec.serve.text_reader import TextReader
from voicespec.threads import use_threads


async def measure(voice: Voice, reader: TextReader, rng: random.Random) -> None:
    seen: set[str] = set()
    options = SynthesisOptions()
    for n in (1, 20, 1, 20):
        text = " ".join(fresh_texts(n, rng, seen))
        t0 = time.perf_counter()
        await reader.read(voice, text, False, None, options)
        t1 = time.perf_counter()
        line = f"{2 * n:2d} sentences: read in {1000 * (t1 - t0):6.1f} ms"
        if hasattr(reader, "settled"):
            await reader.settled()
            line += f", the later sentences' durations {1000 * (time.perf_counter() - t1):6.1f} ms after"
        print(line, flush=True)
    t0 = time.perf_counter()

    async def one(text: str) -> float:
        await reader.read(voice, text, False, None, options)
        return time.perf_counter() - t0

    done = sorted(await asyncio.gather(*(one(text) for text in fresh_texts(16, rng, seen))))
    print(f"16 texts at once: read after {1000 * done[0]:.0f} (first), {1000 * done[8]:.0f} (median), "
          f"{1000 * done[-1]:.0f} ms (last)")


def main() -> None:
    use_threads(1)
    voice = load_voice(None)
    reader = TextReader(1)
    reader.warm(voice)
    try:
        asyncio.run(measure(voice, reader, random.Random(1)))
    finally:
        reader.close()


if __name__ == "__main__":  # the reader's workers start from a forkserver, which imports this file
    main()
