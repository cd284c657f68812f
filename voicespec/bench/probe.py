"""The outside load probe (``voicespec bench --probe 8,16,24,32``): the server as a user starts it
(``voicespec serve`` in a process of its own), N listeners in another (:mod:`.listeners`), all
starting together, each speaking two sentences, played in real time behind a prebuffer.

Every level's sentences are new to the server (drawn from a seeded grammar): a server remembers
the front end's reading of a sentence it has heard, so a probe that repeats its prompts measures a
front end that costs nothing."""

from __future__ import annotations

import asyncio
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from voicespec.bench.budget import capacity
from voicespec.bench.listeners import LoadLevel, listen
from voicespec.serve.protocol import WS_PATH

_WHO = ("The old farmer", "A young teacher", "My neighbor", "The tired driver", "Our new manager", "A curious child",
        "The quiet painter", "His sister", "The local baker", "A friendly nurse", "The tall soldier", "Her cousin")
_DID = ("carried", "painted", "found", "washed", "counted", "borrowed", "opened", "cleaned", "noticed", "repaired",
        "ordered", "followed")
_WHAT = ("a heavy basket", "the broken window", "seven green apples", "an empty bottle", "the wooden table",
         "a letter from home", "the silver key", "a bright umbrella", "the morning paper", "a warm blanket",
         "the garden gate", "a small boat")
_WHERE = ("before lunch", "near the station", "after the storm", "behind the school", "along the river",
          "in the kitchen", "during the party", "at the market", "under the bridge", "on a sunny day",
          "beside the lake", "late last night")
SERVER_START_S = 180.0  # a cold machine: torch and the voice from disk


def fresh_texts(n: int, rng: random.Random, seen: set[str]) -> list[str]:
    """``n`` texts of two sentences each (about 7 s of speech), none of whose sentences is in
    ``seen`` (which gains them): 20,736 sentences to draw from."""
    def sentence() -> str:
        while True:
            s = f"{rng.choice(_WHO)} {rng.choice(_DID)} {rng.choice(_WHAT)} {rng.choice(_WHERE)}."
            if s not in seen:
                seen.add(s)
                return s
    return [f"{sentence()} {sentence()}" for _ in range(n)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def served(args: Sequence[str], start_s: float = SERVER_START_S) -> Iterator[str]:
    """``voicespec serve`` with ``args`` on a free port, once ``/healthz`` answers; its WebSocket URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "voicespec", "serve", "--host", "127.0.0.1", "--port", str(port),
           "--openai-port", "off", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + start_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"voicespec serve exited with {proc.returncode}: {proc.stderr.read()[-2000:]}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"voicespec serve did not answer /healthz within {start_s:g} s") from None
                time.sleep(0.1)
        yield f"ws://127.0.0.1:{port}{WS_PATH}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def run_probe(levels: Sequence[int], server_args: Sequence[str] = (), prebuffer_s: float = 0.2,
              seed: int = 0, budget_ms: float | None = None) -> dict[str, Any]:
    """Each client count once, in order, against one ``voicespec serve`` (``--max-sessions`` the
    largest count, so the probe measures the machine, not the admission limit). A warm-up level
    of one client runs first (the first session pays lazy start-up work). ``largest_clean``: the
    largest count at which, and at every smaller one, every client played without an underrun or
    an error and, with ``budget_ms``, the first audio's p95 was within it (a server that makes
    newcomers wait, ``--max-decoding-contexts``, plays them clean but late)."""
    args = ["--max-sessions", str(max(levels)), *server_args]
    rng, seen = random.Random(seed), set()
    out: list[LoadLevel] = []
    with served(args) as url:
        asyncio.run(listen(url, "warm-up", None, None, fresh_texts(1, rng, seen), 1, prebuffer_s, seed))
        for n in levels:
            out.append(asyncio.run(listen(url, "default", None, None, fresh_texts(n, rng, seen), n, prebuffer_s, seed)))
    found = [lv.to_dict() for lv in out]
    return {"server_args": args, "prebuffer_ms": 1000 * prebuffer_s, "levels": found, "budget_ms": budget_ms,
            "largest_clean": capacity(found, budget_ms)}
