from __future__ import annotations

import pytest

from podserve.bench.ceiling import (
    CeilingSearch,
    ceiling_level,
    knee_level,
    recommend_autoscaling,
)
from podserve.bench.stats import Slo, StepSummary

from .synthetic import capacity_step

CAPACITY = 16.0
# Latency is 10 ms up to 16 in flight, then 10 ms x level/16: e2e <= 25 ms holds up to
# about 40 (within the +-10% noise of the synthetic samples, p99 near 1.1 x).
SLO = Slo(e2e_s=0.025)


def drive(search: CeilingSearch, slo: Slo) -> list[StepSummary]:
    steps: list[StepSummary] = []
    while (level := search.next_level()) is not None:
        assert level not in [s.level for s in steps], "a level is never measured twice"
        step = capacity_step(level, slo, CAPACITY)
        search.observe(level, step.slo_met, step.throughput_rps)
        steps.append(step)
    return steps


def test_auto_search_brackets_the_slo_ceiling() -> None:
    steps = drive(CeilingSearch(max_level=1024), SLO)
    ceiling = ceiling_level(steps)
    assert ceiling is not None
    # Every level up to 25/11 x 16 ~ 36 passes; above 25/9 x 16 ~ 44 every level fails.
    assert 32 <= ceiling <= 44
    failing = [s.level for s in steps if s.slo_met is False]
    assert failing
    assert min(failing) > ceiling
    assert len(steps) <= 12


def test_auto_search_without_slo_stops_at_saturation() -> None:
    steps = drive(CeilingSearch(max_level=1024), Slo())
    levels = [s.level for s in steps]
    assert levels == [1, 2, 4, 8, 16, 32]  # 32 adds no throughput over 16
    assert knee_level(steps) == CAPACITY


def test_auto_search_stops_when_the_first_level_fails() -> None:
    steps = drive(CeilingSearch(), Slo(e2e_s=0.001))
    assert [s.level for s in steps] == [1]
    assert ceiling_level(steps) is None


def test_explicit_levels_are_walked_in_order() -> None:
    search = CeilingSearch([4, 64, 8])
    assert drive(search, SLO)
    assert [search.next_level()] == [None]
    steps = [capacity_step(level, SLO) for level in (4, 64, 8)]
    assert ceiling_level(steps) == 8


def test_ceiling_ignores_passes_above_a_failure() -> None:
    steps = [capacity_step(level, SLO) for level in (8, 64)]
    lucky = capacity_step(128, Slo(e2e_s=10.0))  # passes only because its SLO is loose
    assert ceiling_level([*steps, lucky]) == 8


def test_autoscaling_target_is_headroom_times_in_flight_at_the_ceiling() -> None:
    steps = [capacity_step(level, SLO) for level in (8, 16, 32, 64)]
    advice = recommend_autoscaling(steps, headroom=0.75)
    assert advice is not None
    assert advice.operating_level == 32
    assert advice.target == int(advice.in_flight_at_level * 0.75)
    assert "metric: inflight" in advice.spec_fragment()
    assert f"target: {advice.target}" in advice.spec_fragment()

    queue = recommend_autoscaling(steps, headroom=0.75, metric="queue-depth", server_slots=16)
    assert queue is not None
    assert queue.target == max(1, int(advice.in_flight_at_level * 0.75 - 16))
    with pytest.raises(ValueError, match="server-slots"):
        recommend_autoscaling(steps, metric="queue-depth")


def test_autoscaling_uses_the_knee_without_an_slo() -> None:
    steps = [capacity_step(level, Slo()) for level in (4, 16, 64)]
    advice = recommend_autoscaling(steps)
    assert advice is not None
    assert advice.operating_level == 16
    assert "knee" in advice.reason
