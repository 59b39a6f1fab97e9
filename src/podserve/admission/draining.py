"""Retry-After for requests a draining pod refuses, from the same estimator as a full
queue's (`DrainRateEstimator`), one per model, fed by the requests this pod completes.

The value: the time one request of that model takes to complete at this pod's observed
rate, `retry_after_s(queued=1)`, clamped to the estimator's [1 s, 60 s]. Why: the
refused client should retry *elsewhere*, soon — when this pod is gone does not matter.
A peer replica behind the same Service serves the same model under about the same load,
so it frees a slot about every 1/rate seconds; asking sooner mostly meets its full queue
(which then answers with its own queue-full Retry-After), asking much later wastes the
client's time. For a busy fast model that is the 1 s floor (also about as long as
Kubernetes takes to take this pod out of the endpoints, so the retry rarely lands here
again); for a model completing under one request a second it grows with the interval.
Before this pod has completed any request of the model, the floor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from podserve.admission.retry import DrainRateEstimator
from podserve.core.clock import Clock

HALF_LIFE_S = 5.0
MIN_S = 1.0
MAX_S = 60.0


@dataclass(slots=True)
class _ModelRate:
    estimator: DrainRateEstimator
    first_s: float  # the first completion: the estimator's rate starts from 0 here
    last_s: float  # the latest completion folded in


class DrainingRetryHint:
    __slots__ = ("_clock", "_rates")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._rates: dict[str, _ModelRate] = {}

    def completed(self, model: str, count: int = 1) -> None:
        """`count` requests of `model` completed on this pod."""
        now = self._clock.now_s()
        rate = self._rates.get(model)
        if rate is None:
            # The first completion only starts the clock: folded in at once it would
            # read as a rate over no time at all.
            estimator = DrainRateEstimator(
                self._clock, half_life_s=HALF_LIFE_S, min_s=MIN_S, max_s=MAX_S
            )
            self._rates[model] = _ModelRate(estimator, now, now)
            return
        rate.estimator.record_completions(count)
        rate.last_s = now

    def retry_after_s(self, model: str) -> int:
        """Seconds a client refused by the drain should wait before retrying elsewhere."""
        rate = self._rates.get(model)
        if rate is None or rate.last_s <= rate.first_s:
            return math.ceil(MIN_S)
        # The estimator's moving average starts from 0, so over its first half-lives it
        # reads low by the weight it has accumulated, 1 - 0.5^(t / half-life) (the same
        # bias correction as Adam's); divide it out so a fresh pod's hint is not inflated.
        weight = 1.0 - math.pow(0.5, (rate.last_s - rate.first_s) / HALF_LIFE_S)
        per_s = rate.estimator.rate_per_s / weight
        if per_s <= 0:
            return math.ceil(MIN_S)
        return math.ceil(min(MAX_S, max(MIN_S, 1.0 / per_s)))
