"""The batched engine without sockets: N sessions at once on one decode worker (its model thread
and its audio thread), every session's target pass, fine stage and codec call batched per tick.
What it reports is what the server's capacity is made of: the time of a tick at N sessions, the
session-steps per second it gives, and how many times real time the N streams run together."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from voicespec.engine.config import DecodeConfig, SamplingConfig
from voicespec.pipeline.synthesis import AudioChunk, SynthesisOptions
from voicespec.pipeline.voice import Voice
from voicespec.serve.scheduler import FINISHED, Credits, DecodeWorker, Failed, IncrementalStream, Job


@dataclass
class BatchLevel:
    sessions: int
    ticks: int
    ms_per_tick: float  # wall time of the run over its ticks: one decode step of every active session
    mean_batch: float  # target passes per tick (sessions end at different times)
    steps_per_s: float  # session-steps (target passes) per second, all sessions together
    audio_x_realtime: float  # audio seconds made per wall second, all sessions together
    wall_s: float
    errors: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_level(voice: Voice, texts: Sequence[str], n: int, sampling: SamplingConfig, max_steps: int, seed: int) -> BatchLevel:
    """``n`` sessions (prompts round-robin, seeds ``seed + i``), plain decoding, all queued at once."""
    lock, done = threading.Lock(), threading.Semaphore(0)
    audio, errors, passes = [0.0], [0], [0]

    def deliver(job: Job, item: Any) -> None:
        if isinstance(item, AudioChunk):
            job.credits.released += 1  # a reader that keeps up
            with lock:
                audio[0] += item.pcm.numel() / job.stream.stats.sample_rate
        elif item is FINISHED or isinstance(item, Failed):
            with lock:
                errors[0] += isinstance(item, Failed)
                passes[0] += job.stream.stats.decode.target_passes
            done.release()

    worker = DecodeWorker(queue_limit=8, deliver=deliver)
    for i in range(n):
        stream = IncrementalStream(voice, texts[i % len(texts)], SynthesisOptions(
            DecodeConfig(sampling, gamma=0, max_steps=max_steps, seed=seed + i)))
        stream.close()
        worker.add(Job(stream, i, None, Credits(), None))
    t = time.perf_counter()
    worker.start()
    try:
        for _ in range(n):
            done.acquire()
    finally:
        wall = time.perf_counter() - t
        worker.stop()
    ticks = max(worker.ticks, 1)
    return BatchLevel(sessions=n, ticks=ticks, ms_per_tick=1000 * wall / ticks, mean_batch=passes[0] / ticks,
                      steps_per_s=passes[0] / wall, audio_x_realtime=audio[0] / wall, wall_s=wall, errors=errors[0])


def run_batching(voice: Voice, texts: Sequence[str], sizes: Sequence[int], max_steps: int, seed: int = 0) -> list[BatchLevel]:
    """Each session count in turn, after a warm-up run."""
    run_level(voice, texts, 2, voice.sampling, max_steps, seed)
    return [run_level(voice, texts, n, voice.sampling, max_steps, seed) for n in sizes]
