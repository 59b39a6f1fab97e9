"""Synthetic step results: a server with a fixed capacity, for ceiling and report tests."""

from __future__ import annotations

import numpy as np

from podserve.bench.records import StepColumns
from podserve.bench.stats import Slo, StepSummary, summarize


def columns(
    latency_s: list[float],
    status: list[int] | None = None,
    *,
    window_s: float = 1.0,
    ttft_s: list[float] | None = None,
    tokens: list[int] | None = None,
) -> StepColumns:
    n = len(latency_s)
    return StepColumns(
        start_s=np.zeros(n),
        latency_s=np.asarray(latency_s, dtype=float),
        status=np.asarray(status if status is not None else [200] * n, dtype=np.int64),
        ttft_s=np.asarray(ttft_s if ttft_s is not None else [np.nan] * n, dtype=float),
        output_tokens=np.asarray(tokens if tokens is not None else [0] * n, dtype=np.int64),
        itl_s=np.zeros(0),
        send_lag_s=np.zeros(0),
        window_s=window_s,
        client_cpu_fraction=0.1,
    )


def capacity_step(
    level: float, slo: Slo, capacity: float = 16.0, service_s: float = 0.01, n: int = 200
) -> StepSummary:
    """A closed-loop step against a server that runs `capacity` requests at once: latency
    is flat up to capacity and grows linearly (queueing) beyond it."""
    latency_s = service_s * max(1.0, level / capacity)
    rng = np.random.default_rng(int(level))
    samples = (latency_s * rng.uniform(0.9, 1.1, size=n)).tolist()
    throughput = min(level, capacity) / service_s
    return summarize(columns(samples, window_s=n / throughput), "concurrency", level, slo)
