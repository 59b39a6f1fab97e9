from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from podserve.bench.stats import Slo, distribution_ms, parse_duration_s, summarize

from .synthetic import columns

latencies = st.lists(st.floats(min_value=1e-5, max_value=10.0), min_size=1, max_size=200)
statuses = st.sampled_from([200, 200, 200, 503, 400, -2])


@given(latencies)
def test_percentiles_are_ordered_and_bounded(values: list[float]) -> None:
    dist = distribution_ms(np.asarray(values))
    assert dist is not None
    low, high = min(values) * 1000, max(values) * 1000
    tolerance = 1e-9 * high
    assert low - tolerance <= dist.p50 <= dist.p90 <= dist.p99 <= dist.max + tolerance
    assert math.isclose(dist.max, high)
    assert dist.count == len(values)


def test_percentiles_match_known_values() -> None:
    dist = distribution_ms(np.arange(1, 101) / 1000.0)  # 1..100 ms
    assert dist is not None
    assert dist.p50 == pytest.approx(50.5)
    assert dist.p90 == pytest.approx(90.1)
    assert dist.p99 == pytest.approx(99.01)
    assert distribution_ms(np.asarray([math.nan])) is None


@given(st.data())
def test_goodput_counts_exactly_the_successes_within_every_limit(data: st.DataObject) -> None:
    n = data.draw(st.integers(min_value=1, max_value=60))
    lat = data.draw(st.lists(st.floats(0.001, 2.0), min_size=n, max_size=n))
    status = data.draw(st.lists(statuses, min_size=n, max_size=n))
    fractions = data.draw(st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n))
    tokens = data.draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    ttft = [lat_i * f for lat_i, f in zip(lat, fractions, strict=True)]
    slo = Slo(
        ttft_s=data.draw(st.floats(0.001, 2.0)),
        tpot_s=data.draw(st.floats(0.0001, 0.5)),
        e2e_s=data.draw(st.floats(0.001, 2.0)),
    )
    window_s = data.draw(st.floats(0.5, 100.0))
    cols = columns(lat, status, window_s=window_s, ttft_s=ttft, tokens=tokens)
    summary = summarize(cols, "rate", 10.0, slo, attainment_target=0.9)

    def meets(i: int) -> bool:
        tpot = (lat[i] - ttft[i]) / (tokens[i] - 1) if tokens[i] > 1 else 0.0
        assert slo.ttft_s is not None
        assert slo.tpot_s is not None
        assert slo.e2e_s is not None
        return (
            200 <= status[i] < 300
            and lat[i] <= slo.e2e_s
            and ttft[i] <= slo.ttft_s
            and tpot <= slo.tpot_s
        )

    good = sum(meets(i) for i in range(n))
    assert summary.goodput_rps == pytest.approx(good / window_s)
    assert summary.slo_attainment == pytest.approx(good / n)
    assert summary.slo_met == (good / n >= 0.9)
    assert summary.goodput_rps is not None
    assert summary.goodput_rps <= summary.throughput_rps + 1e-9
    assert summary.ok == sum(200 <= s < 300 for s in status)
    assert sum(summary.status_counts.values()) == n


def test_non_streamed_requests_use_latency_as_ttft() -> None:
    cols = columns([0.1, 0.3])
    summary = summarize(cols, "concurrency", 1, Slo(ttft_s=0.2))
    assert summary.slo_attainment == 0.5
    assert summary.ttft_ms is None  # nothing streamed


def test_little_law_in_flight() -> None:
    summary = summarize(columns([0.5] * 8, window_s=2.0), "concurrency", 2, Slo())
    assert summary.mean_in_flight == pytest.approx(2.0)
    assert summary.throughput_rps == pytest.approx(4.0)
    assert summary.goodput_rps is None
    assert summary.slo_met is None


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("1.5s", 1.5), ("2m", 120.0), ("800us", 0.0008), ("3", 3.0)],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration_s(text) == pytest.approx(seconds)


def test_slo_parse_defaults_to_milliseconds() -> None:
    slo = Slo.parse("ttft=200, tpot=50ms,e2e=2s")
    assert (slo.ttft_s, slo.tpot_s, slo.e2e_s) == pytest.approx((0.2, 0.05, 2.0))
    assert Slo.parse("").is_empty
    for bad in ("latency=1s", "ttft", "e2e=fast"):
        with pytest.raises(ValueError, match=r"ttft=, tpot= or e2e=|not a duration"):
            Slo.parse(bad)
