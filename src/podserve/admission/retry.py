"""Retry-After from the observed drain rate: how long until the queue ahead would empty.

An exponentially weighted rate of completions per second; the hint is
queued / rate, clamped to [min_s, max_s] and rounded up to whole seconds (the header
takes integers).
"""

from __future__ import annotations

import math

from podserve.core.clock import Clock


class DrainRateEstimator:
    __slots__ = ("_clock", "_half_life_s", "_last_s", "_max_s", "_min_s", "_rate_per_s")

    def __init__(
        self, clock: Clock, *, half_life_s: float = 5.0, min_s: float = 1.0, max_s: float = 60.0
    ) -> None:
        self._clock = clock
        self._half_life_s = half_life_s
        self._min_s = min_s
        self._max_s = max_s
        self._rate_per_s = 0.0
        self._last_s = clock.now_s()

    @property
    def rate_per_s(self) -> float:
        return self._rate_per_s

    def record_completions(self, count: int) -> None:
        """Fold `count` completions observed since the previous call into the rate."""
        now = self._clock.now_s()
        elapsed = now - self._last_s
        if elapsed <= 0:
            # Same instant: fold in as if over a millisecond, to keep the rate finite.
            elapsed = 1e-3
        self._last_s = now
        instant = count / elapsed
        weight = 1.0 - math.pow(0.5, elapsed / self._half_life_s)
        self._rate_per_s += weight * (instant - self._rate_per_s)

    def retry_after_s(self, queued: int) -> int:
        if self._rate_per_s <= 0:
            return int(self._min_s)
        estimate = queued / self._rate_per_s
        return math.ceil(min(self._max_s, max(self._min_s, estimate)))


def retry_after_header(retry_after_s: float) -> str:
    """The one Retry-After formatter (HTTP header and gRPC trailing metadata alike):
    whole seconds, rounded up, at least 1 (RFC 9110 §10.2.3 takes delay-seconds)."""
    return str(max(1, math.ceil(retry_after_s)))
