"""Counters, gauges and histograms rendered in the Prometheus text exposition format (0.0.4).

Written by hand (about a page) rather than adding ``prometheus-client`` as a dependency: the
server needs a dozen metrics, all updated from one asyncio thread, so no locking is involved.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

LabelKey = tuple[tuple[str, str], ...]


def _fmt(x: float) -> str:
    if math.isinf(x):
        return "+Inf" if x > 0 else "-Inf"
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 2**53 else repr(x)


def _labels(key: LabelKey, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = key + extra
    if not items:
        return ""
    esc = (v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for _, v in items)
    return "{" + ",".join(f'{k}="{v}"' for (k, _), v in zip(items, esc)) + "}"


class _Metric:
    kind = ""

    def __init__(self, name: str, help: str) -> None:
        self.name, self.help = name, help

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help: str) -> None:
        super().__init__(name, help)
        self.values: dict[LabelKey, float] = {}

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        if amount < 0:
            raise ValueError("counters only go up")
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def get(self, **labels: str) -> float:
        return self.values.get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> list[str]:
        values = self.values or {(): 0.0}
        return self.header() + [f"{self.name}{_labels(k)} {_fmt(v)}" for k, v in sorted(values.items())]


class Gauge(Counter):
    kind = "gauge"

    def set(self, value: float, **labels: str) -> None:
        self.values[tuple(sorted(labels.items()))] = float(value)

    def inc(self, amount: float = 1.0, **labels: str) -> None:
        key = tuple(sorted(labels.items()))
        self.values[key] = self.values.get(key, 0.0) + amount

    def dec(self, amount: float = 1.0, **labels: str) -> None:
        self.inc(-amount, **labels)


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help: str, buckets: Sequence[float]) -> None:
        super().__init__(name, help)
        self.buckets = sorted(buckets)
        self.counts = [0] * (len(self.buckets) + 1)  # last: +Inf
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        if math.isnan(value):
            return
        self.sum += value
        self.count += 1
        for i, b in enumerate(self.buckets):
            if value <= b:
                self.counts[i] += 1
                return
        self.counts[-1] += 1

    def render(self) -> list[str]:
        lines, running = self.header(), 0
        for b, c in zip([*self.buckets, math.inf], self.counts):
            running += c
            lines.append(f"{self.name}_bucket{_labels((), (('le', _fmt(b)),))} {running}")
        return lines + [f"{self.name}_sum {_fmt(self.sum)}", f"{self.name}_count {self.count}"]


class Registry:
    def __init__(self) -> None:
        self.metrics: list[_Metric] = []

    def add(self, metric: _Metric) -> _Metric:
        self.metrics.append(metric)
        return metric

    def counter(self, name: str, help: str) -> Counter:
        return self.add(Counter(name, help))  # type: ignore[return-value]

    def gauge(self, name: str, help: str) -> Gauge:
        return self.add(Gauge(name, help))  # type: ignore[return-value]

    def histogram(self, name: str, help: str, buckets: Sequence[float]) -> Histogram:
        return self.add(Histogram(name, help, buckets))  # type: ignore[return-value]

    def render(self) -> str:
        return "\n".join(line for m in self.metrics for line in m.render()) + "\n"


def parse_exposition(text: str) -> dict[str, float]:
    """Sample lines back to ``{'name{labels}': value}`` (for tests and quick checks)."""
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out
