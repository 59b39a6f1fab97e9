"""An injectable monotonic clock, so pure policies run on a fake clock in tests."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_s(self) -> float:
        """Monotonic seconds; only differences are meaningful."""
        ...


class MonotonicClock:
    __slots__ = ()

    def now_s(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock that moves only when told to."""

    __slots__ = ("_now_s",)

    def __init__(self, start_s: float = 0.0) -> None:
        self._now_s = start_s

    def now_s(self) -> float:
        return self._now_s

    def advance(self, delta_s: float) -> None:
        if delta_s < 0:
            raise ValueError("a monotonic clock cannot go backwards")
        self._now_s += delta_s


MONOTONIC = MonotonicClock()
