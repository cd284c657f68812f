"""Per-connection budgets: a token bucket, so a client may burst but not sustain more than its rate."""

from __future__ import annotations

import time
from collections.abc import Callable


class Bucket:
    """``rate`` tokens per second, holding at most ``burst``; :meth:`take` spends them or says no."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens, self.t = burst, clock()

    def take(self, n: float = 1.0) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.t) * self.rate)
        self.t = now
        if n > self.tokens:
            return False
        self.tokens -= n
        return True
