"""Ceiling search: which load a server sustains within its SLO, where its knee is, and the
autoscaling target that follows.

`CeilingSearch` is a pure state machine (no I/O, no clock): ask it for the next level,
tell it how that level went. Given explicit levels it walks them in order. In automatic
mode it doubles the load until the SLO fails (or, without an SLO, until throughput stops
growing), then bisects between the last level that held and the first that failed.

The knee is the lowest level that reaches KNEE_FRACTION (90%) of the peak throughput:
below it more load still buys throughput, above it load mostly buys queueing. (Kleinrock's
power, throughput ÷ latency, was tried first; on real servers, whose latency grows from
the first extra request, it names concurrency 1 almost every time.)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from podserve.bench.stats import StepSummary

AutoscaleMetric = Literal["inflight", "queue-depth"]


class CeilingSearch:
    def __init__(
        self,
        levels: Sequence[float] | None = None,
        *,
        start: float = 1.0,
        growth: float = 2.0,
        max_level: float = 1024.0,
        integer: bool = True,
        resolution: float = 0.1,
        saturation_gain: float = 0.05,
    ) -> None:
        """`levels`: explicit sweep; None searches automatically from `start`.
        `resolution`: bisection stops when the bracket is this fraction of its low end
        (or one unit, for integer levels). `saturation_gain`: without an SLO, growth
        stops once doubling the load adds less than this fraction of throughput."""
        if growth <= 1:
            raise ValueError("growth must be above 1")
        self._explicit = list(levels) if levels is not None else None
        self._integer = integer
        self._growth = growth
        self._max_level = max_level
        self._resolution = resolution
        self._saturation_gain = saturation_gain
        self._next: float | None = self._round(start)
        self.last_pass: float | None = None
        self.first_fail: float | None = None
        self._best_throughput = 0.0
        self._seen: set[float] = set()

    def next_level(self) -> float | None:
        """The next level to measure, or None when the search is over."""
        if self._explicit is not None:
            return self._explicit.pop(0) if self._explicit else None
        return self._next

    def observe(self, level: float, passed: bool | None, throughput: float) -> None:
        """`passed`: the SLO held at `level` (None when there is no SLO)."""
        if self._explicit is not None:
            return
        self._seen.add(level)
        if passed is False:
            if self.first_fail is None or level < self.first_fail:
                self.first_fail = level
        elif self.last_pass is None or level > self.last_pass:
            self.last_pass = level
        saturated = passed is None and throughput < self._best_throughput * (
            1 + self._saturation_gain
        )
        self._best_throughput = max(self._best_throughput, throughput)
        self._next = self._choose_next(level, saturated)

    def _choose_next(self, level: float, saturated: bool) -> float | None:
        if self.first_fail is None:
            if saturated or level >= self._max_level:
                return None
            return min(self._round(level * self._growth), self._max_level)
        if self.last_pass is None:
            return None  # even the lowest level failed: there is no ceiling to refine
        low, high = self.last_pass, self.first_fail
        step = max(1.0, low * self._resolution) if self._integer else low * self._resolution
        if high - low <= step:
            return None
        middle = self._round((low + high) / 2)
        if middle in self._seen or not low < middle < high:
            return None
        return middle

    def _round(self, level: float) -> float:
        return float(max(1, round(level))) if self._integer else level


def ceiling_level(steps: Sequence[StepSummary]) -> float | None:
    """The highest level whose SLO held with every lower level holding too."""
    best: float | None = None
    for step in sorted(steps, key=lambda s: s.level):
        if step.slo_met is not True:
            break
        best = step.level
    return best


KNEE_FRACTION = 0.9


def knee_level(steps: Sequence[StepSummary]) -> float | None:
    """The lowest level whose throughput reaches KNEE_FRACTION of the peak."""
    measured = [s for s in steps if s.throughput_rps > 0]
    if not measured:
        return None
    peak = max(s.throughput_rps for s in measured)
    return min(s.level for s in measured if s.throughput_rps >= KNEE_FRACTION * peak)


@dataclass(frozen=True, slots=True)
class AutoscalingAdvice:
    metric: AutoscaleMetric
    target: int
    operating_level: float
    in_flight_at_level: float
    reason: str

    def spec_fragment(self) -> str:
        """The `ModelService` autoscaling block, as YAML."""
        return f"# {self.reason}\nautoscaling:\n  metric: {self.metric}\n  target: {self.target}\n"


def recommend_autoscaling(
    steps: Sequence[StepSummary],
    *,
    headroom: float = 0.8,
    metric: AutoscaleMetric = "inflight",
    server_slots: int | None = None,
) -> AutoscalingAdvice | None:
    """Per-pod target: the in-flight requests (Little's law, as the client saw them) at the
    SLO ceiling — or at the knee when no SLO was given — times `headroom`, so that pods
    are added before the SLO breaks. For `queue-depth`, the requests the server runs at
    once (`server_slots`: max batch size x instances) are not queued and are subtracted.
    """
    ceiling = ceiling_level(steps)
    basis, level = ("SLO ceiling", ceiling) if ceiling is not None else ("knee", knee_level(steps))
    if level is None:
        return None
    step = next(s for s in steps if s.level == level)
    in_flight = step.mean_in_flight
    unit = "concurrency" if step.mode == "concurrency" else "req/s"
    if metric == "queue-depth":
        if server_slots is None:
            raise ValueError("a queue-depth target needs the server's slots (--server-slots)")
        target = max(1, math.floor(in_flight * headroom - server_slots))
    else:
        target = max(1, math.floor(in_flight * headroom))
    reason = (
        f"podserve bench: {basis} at {unit} {level:g} with {in_flight:.1f} requests in "
        f"flight per pod; target = {headroom:.0%} of that"
        + (f" minus {server_slots} running slots" if metric == "queue-depth" else "")
    )
    return AutoscalingAdvice(metric, target, level, in_flight, reason)
