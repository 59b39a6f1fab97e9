"""Closed and open loop against a real server, counted by requests (no timing asserted)."""

from __future__ import annotations

import pytest

from podserve.bench.loop import Budget, ClosedLoop, OpenLoop, run_step
from podserve.bench.stats import Slo, summarize
from podserve.bench.wire import encode_request
from podserve.bench.workloads import (
    OipWorkload,
    OpenAIWorkload,
    PreparedRequest,
    Target,
    TensorInput,
)
from podserve.core.tensors import Datatype


def _oip(port: int) -> list[PreparedRequest]:
    workload = OipWorkload("m", (TensorInput("x", (1, 4), Datatype.FP32),), variants=3)
    return workload.prepare(Target("127.0.0.1", port), {})


@pytest.mark.parametrize(
    "level",
    [
        ClosedLoop(1),
        ClosedLoop(5),
        OpenLoop(2000.0, "poisson"),
        OpenLoop(2000.0, "bursty"),
        OpenLoop(2000.0, "constant"),
    ],
)
async def test_request_count_mode_measures_exactly_n(
    server_port: int, level: ClosedLoop | OpenLoop
) -> None:
    budget = Budget(duration_s=None, requests=23, warmup_s=0.0, timeout_s=10)
    columns = await run_step(Target("127.0.0.1", server_port), _oip(server_port), level, budget)
    assert columns.count == 23
    assert set(columns.status.tolist()) == {200}
    assert (columns.latency_s > 0).all()
    if isinstance(level, OpenLoop):
        assert columns.send_lag_s.size == 23


async def test_error_statuses_are_counted_by_code(server_port: int) -> None:
    authority = f"127.0.0.1:{server_port}"
    requests = [
        PreparedRequest(encode_request("GET", authority, "/status/503")),
        PreparedRequest(encode_request("GET", authority, "/status/200")),
    ]
    budget = Budget(duration_s=None, requests=10, warmup_s=0.0)
    columns = await run_step(Target("127.0.0.1", server_port), requests, ClosedLoop(1), budget)
    summary = summarize(columns, "concurrency", 1, Slo(e2e_s=60.0))
    assert summary.status_counts == {"200": 5, "503": 5}
    assert summary.errors == {"503": 5}
    assert summary.slo_attainment == 0.5


async def test_streams_are_measured_and_truncated_streams_are_errors(server_port: int) -> None:
    target = Target("127.0.0.1", server_port)
    streams = OpenAIWorkload("m", variants=2).prepare(target, {})
    budget = Budget(duration_s=None, requests=6, warmup_s=0.0)
    columns = await run_step(target, streams, ClosedLoop(2), budget)
    summary = summarize(columns, "concurrency", 2, Slo())
    assert summary.ok == 6
    assert summary.ttft_ms is not None
    assert summary.ttft_ms.count == 6
    assert summary.itl_ms is not None
    assert summary.itl_ms.count == 6 * 3
    assert summary.tpot_ms is not None

    truncated = [
        PreparedRequest(r.raw.replace(b"POST /v1/", b"POST /truncated/v1/"), stream=True)
        for r in streams
    ]
    bad = await run_step(target, truncated, ClosedLoop(1), budget)
    assert summarize(bad, "concurrency", 1, Slo()).status_counts == {"stream-incomplete": 6}


async def test_refused_connections_are_connect_errors() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        target = Target("127.0.0.1", sock.getsockname()[1])
        requests = [PreparedRequest(encode_request("GET", target.authority, "/"))]
        budget = Budget(duration_s=None, requests=4, warmup_s=0.0)
        columns = await run_step(target, requests, ClosedLoop(2), budget)
    assert summarize(columns, "concurrency", 2, Slo()).status_counts == {"connect-error": 4}


def test_budget_needs_exactly_one_limit() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        Budget(duration_s=1.0, requests=5)
    with pytest.raises(ValueError, match="exactly one"):
        Budget(duration_s=None, requests=None)
