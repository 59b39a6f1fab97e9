"""The one Retry-After estimator and formatter, on a fake clock."""

from __future__ import annotations

import pytest

from podserve.admission import DrainRateEstimator, retry_after_header
from podserve.core.clock import FakeClock


def test_no_observations_means_the_minimum() -> None:
    estimator = DrainRateEstimator(FakeClock())
    assert estimator.rate_per_s == 0
    assert estimator.retry_after_s(100) == 1


def test_the_hint_is_the_queue_over_the_observed_rate() -> None:
    clock = FakeClock()
    estimator = DrainRateEstimator(clock, half_life_s=1.0)
    for _ in range(50):  # a steady 10 completions a second, long enough to converge
        clock.advance(1.0)
        estimator.record_completions(10)
    assert estimator.rate_per_s == pytest.approx(10, rel=1e-6)
    assert estimator.retry_after_s(35) == 4  # 3.5 s rounded up: whole seconds in the header
    assert estimator.retry_after_s(45) == 5
    assert estimator.retry_after_s(0) == 1  # clamped below
    assert estimator.retry_after_s(10_000) == 60  # and above


def test_the_rate_follows_a_slowdown_with_its_half_life() -> None:
    clock = FakeClock()
    estimator = DrainRateEstimator(clock, half_life_s=2.0)
    for _ in range(40):
        clock.advance(1.0)
        estimator.record_completions(10)
    clock.advance(2.0)  # one half-life with nothing completed
    estimator.record_completions(0)
    assert estimator.rate_per_s == pytest.approx(5, rel=1e-6)


def test_completions_in_the_same_instant_keep_the_rate_finite() -> None:
    clock = FakeClock()
    estimator = DrainRateEstimator(clock)
    estimator.record_completions(3)
    estimator.record_completions(3)
    assert 0 < estimator.rate_per_s < float("inf")


@pytest.mark.parametrize(
    ("seconds", "header"), [(0, "1"), (0.2, "1"), (1.0, "1"), (1.01, "2"), (59.5, "60")]
)
def test_one_formatter_for_every_edge(seconds: float, header: str) -> None:
    assert retry_after_header(seconds) == header
