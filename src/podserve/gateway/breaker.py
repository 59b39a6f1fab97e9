"""A circuit breaker per upstream endpoint: closed → open → half-open, on an injected clock.

Envoy's outlier detection ejects a host after `consecutive_5xx` (default 5) failures for a
base ejection time; Hystrix then lets one trial request through. Same shape here: after
`failures` consecutive failures the endpoint is skipped for `open_s`; then exactly one
probe is let through, and its outcome closes or re-opens the breaker.
(envoyproxy/envoy api/envoy/config/cluster/v3/outlier_detection.proto)
"""

from __future__ import annotations

from enum import Enum


class BreakerState(Enum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half-open"  # one probe in flight


class Breaker:
    """`min_span_s`: the failures in a row must also span this long before the breaker
    opens. At a high request rate a brownout (a share of calls slow, the rest fine)
    easily gives a few failures in a row, and opening on them turned a partial slowdown
    into refusing everything; an outage keeps failing for as long as it lasts."""

    __slots__ = (
        "_failures",
        "_first_failure_s",
        "_opened_at_s",
        "_state",
        "failures",
        "min_span_s",
        "open_s",
    )

    def __init__(self, failures: int = 5, open_s: float = 10.0, min_span_s: float = 0.0) -> None:
        self.failures = failures
        self.open_s = open_s
        self.min_span_s = min_span_s
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._first_failure_s = 0.0
        self._opened_at_s = 0.0

    @property
    def state(self) -> BreakerState:
        return self._state

    def allows(self, now_s: float) -> bool:
        """May a request go to this endpoint now? (Does not reserve the probe.)"""
        if self._state is BreakerState.CLOSED:
            return True
        if self._state is BreakerState.OPEN:
            return now_s - self._opened_at_s >= self.open_s
        return False  # a probe is already in flight

    def wait_s(self, now_s: float) -> float:
        """How long until `allows` could say yes: the rest of the open period (0 when
        closed or when the open period is over; a half-open breaker waits on its probe,
        which ends within a call's deadline, so 0 there too)."""
        if self._state is BreakerState.OPEN:
            return max(0.0, self.open_s - (now_s - self._opened_at_s))
        return 0.0

    def on_attempt(self, now_s: float) -> None:
        """A request is being sent: after the open period it becomes the one probe."""
        if self._state is BreakerState.OPEN and now_s - self._opened_at_s >= self.open_s:
            self._state = BreakerState.HALF_OPEN

    def on_success(self) -> None:
        self._state = BreakerState.CLOSED
        self._failures = 0

    def on_failure(self, now_s: float) -> None:
        if self._failures == 0:
            self._first_failure_s = now_s
        self._failures += 1
        streak = (
            self._failures >= self.failures and now_s - self._first_failure_s >= self.min_span_s
        )
        if self._state is BreakerState.HALF_OPEN or streak:
            self._state = BreakerState.OPEN
            self._opened_at_s = now_s
            self._failures = 0
