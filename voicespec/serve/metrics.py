"""The server's Prometheus metrics (``prometheus-client``), in a registry of their own per server,
so several servers can run in one process (as the tests do)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

OUTCOMES = ("done", "cancelled", "disconnected", "error")


class ServerMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self.active_sessions = Gauge("voicespec_active_sessions", "Open WebSocket sessions.", registry=r)
        self.active_contexts = Gauge("voicespec_active_contexts", "Contexts being synthesized or waiting for text.", registry=r)
        self.sessions_total = Counter("voicespec_sessions_total", "WebSocket sessions accepted.", registry=r)
        self.contexts_started = Counter("voicespec_contexts_started_total", "Contexts opened.", registry=r)
        self.contexts_total = Counter("voicespec_contexts_total", "Contexts finished, by outcome (done, cancelled, disconnected, error).",
                                      ["outcome"], registry=r)
        for outcome in OUTCOMES:
            self.contexts_total.labels(outcome)  # exported as 0 before the first one
        self.errors_total = Counter("voicespec_errors_total", "Errors sent to clients or HTTP rejections, by code.",
                                    ["code"], registry=r)
        self.ttfa = Histogram("voicespec_ttfa_seconds", "Time from a context's first speakable text to its first audio frame sent.",
                              buckets=[0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2, 5], registry=r)
        self.rtf = Histogram("voicespec_rtf", "Decode-thread seconds per audio second, per context.",
                             buckets=[0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 5], registry=r)
        self.acceptance = Histogram("voicespec_acceptance_rate", "Fraction of drafted steps accepted, per context.",
                                    buckets=[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1], registry=r)
        self.accepted_length = Histogram("voicespec_mean_accepted_length", "Steps committed per target pass, per context.",
                                         buckets=[1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6, 8], registry=r)
        self.drafted_total = Counter("voicespec_drafted_steps_total", "Draft steps proposed.", registry=r)
        self.accepted_total = Counter("voicespec_accepted_steps_total", "Draft steps accepted.", registry=r)
        self.passes_total = Counter("voicespec_target_passes_total", "Target forward passes (verify steps).", registry=r)
        self.audio_total = Counter("voicespec_audio_seconds_total", "Audio seconds sent.", registry=r)
        self.client_underruns = Counter("voicespec_client_underruns_total", "Playback underruns reported by clients.", registry=r)
        self.client_underrun_s = Counter("voicespec_client_underrun_seconds_total", "Playback stall seconds reported by clients.",
                                         registry=r)

    def error(self, code: str) -> None:
        self.errors_total.labels(code).inc()

    def finished(self, outcome: str) -> None:
        self.contexts_total.labels(outcome).inc()

    def record_done(self, ttfa: float | None, stats: dict[str, Any], d) -> None:
        """A context that finished normally: its latency, speed and drafting (``d``: DecodeStats)."""
        self.finished("done")
        if ttfa is not None:
            self.ttfa.observe(ttfa)
        if stats["rtf"] is not None:
            self.rtf.observe(stats["rtf"])
        if d.drafted:
            self.acceptance.observe(d.acceptance_rate)
        if d.target_passes:
            self.accepted_length.observe(d.mean_accepted_length)
        self.drafted_total.inc(d.drafted)
        self.accepted_total.inc(d.accepted)
        self.passes_total.inc(d.target_passes)
        self.audio_total.inc(stats["audio_s"])

    def watch_frame_cache(self, cache: Any) -> None:
        """Report a :class:`~voicespec.pipeline.frame_cache.FrameCache`'s counts, read at each scrape."""
        self.registry.register(_FrameCacheCollector(cache))

    def watch_worker(self, worker: Any) -> None:
        """Report the decode worker's waiting newcomers (:class:`~voicespec.serve.scheduler.DecodeWorker`), read at each scrape."""
        self.registry.register(_WaitingCollector(worker))

    def exposition(self) -> tuple[bytes, str]:
        """The ``/metrics`` body and its content type."""
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _WaitingCollector:
    """How many newcomers the decode worker holds back (written by the decode thread, read when
    scraped): a load balancer can route away from a server whose newcomers wait."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker

    def collect(self):
        yield GaugeMetricFamily("voicespec_waiting_contexts",
                                "New contexts waiting for a place under --max-decoding-contexts at the last decode tick.",
                                value=self.worker.held)
        if (free := self.worker.free) is not None:
            yield GaugeMetricFamily("voicespec_free_decoding_places",
                                    "Places left under --max-decoding-contexts at the last decode tick.", value=free)


class _FrameCacheCollector:
    """Hits, misses and evictions are the cache's own counters (it is shared with the decode thread),
    so they are read when scraped rather than mirrored."""

    def __init__(self, cache: Any) -> None:
        self.cache = cache

    def collect(self):
        c = self.cache.counts
        yield CounterMetricFamily("voicespec_frame_cache_hits", "Sentences replayed from the frame cache.", value=c.hits)
        yield CounterMetricFamily("voicespec_frame_cache_misses", "Cacheable sentences decoded (not in the cache).", value=c.misses)
        yield CounterMetricFamily("voicespec_frame_cache_evictions", "Sentences evicted (least recently used).", value=c.evictions)
        yield GaugeMetricFamily("voicespec_frame_cache_bytes", "Bytes of frames held.", value=self.cache.bytes)
