"""Retry-After for requests a draining pod refuses, on a fake clock: the time one
request of the model takes to complete at this pod's observed rate, within [1, 60] s."""

from __future__ import annotations

from podserve.admission.draining import DrainingRetryHint
from podserve.core.clock import FakeClock


def test_no_completions_means_the_floor() -> None:
    hint = DrainingRetryHint(FakeClock())
    assert hint.retry_after_s("llm") == 1
    hint.completed("llm")  # one completion starts the clock; it measures no rate yet
    assert hint.retry_after_s("llm") == 1


def test_a_slow_model_gets_its_completion_interval() -> None:
    clock = FakeClock()
    hint = DrainingRetryHint(clock)
    for _ in range(4):  # one completion every 7 s
        hint.completed("llm")
        clock.advance(7.0)
    assert hint.retry_after_s("llm") == 7
    assert hint.retry_after_s("other") == 1  # per model


def test_a_fresh_estimate_is_not_inflated_by_the_average_starting_at_zero() -> None:
    """Two completions 0.5 s apart: the raw moving average reads ~0.13/s (8 s); the
    bias-corrected rate is the observed 2/s, so the hint is the 1 s floor."""
    clock = FakeClock()
    hint = DrainingRetryHint(clock)
    hint.completed("fast")
    clock.advance(0.5)
    hint.completed("fast")
    assert hint.retry_after_s("fast") == 1


def test_the_hint_is_capped() -> None:
    clock = FakeClock()
    hint = DrainingRetryHint(clock)
    hint.completed("stuck")
    clock.advance(600.0)
    hint.completed("stuck")
    assert hint.retry_after_s("stuck") == 60
