"""Readiness hysteresis on queue fill: saturated above the high watermark, and only
unsaturated again below the low watermark, so readiness does not flap at the edge."""

from __future__ import annotations


class QueuePressure:
    __slots__ = ("_high", "_low", "saturated")

    def __init__(self, high_ratio: float, low_ratio: float) -> None:
        if not 0 <= low_ratio < high_ratio <= 1:
            raise ValueError("need 0 <= low watermark < high watermark <= 1")
        self._high = high_ratio
        self._low = low_ratio
        self.saturated = False

    def update(self, fill_ratio: float) -> bool:
        if self.saturated:
            if fill_ratio < self._low:
                self.saturated = False
        elif fill_ratio > self._high:
            self.saturated = True
        return self.saturated
