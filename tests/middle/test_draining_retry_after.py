"""A draining pod's Retry-After comes from the drain-rate estimator (admission/draining.py),
the same on both edges: the completion interval this pod observed for the model, on a
fake clock, so the value is exact and no test waits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest

from podserve.config.settings import ServerSettings
from podserve.core.clock import FakeClock
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from podserve.server.app import App
from podserve.server.grpc import start_grpc_server, stop_grpc_server
from tests.middle.conftest import make_repository, metric
from tests.middle.edges import Edge, GrpcEdge, RestEdge

X = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def plane(tmp_path: Path, clock: FakeClock) -> AsyncIterator[DataPlane]:
    settings = ServerSettings(
        model_repository=make_repository(tmp_path / "models"),
        cache_dir=tmp_path / "cache",
        grpc_port=-1,
    )
    dataplane = build_dataplane(settings, asyncio.get_running_loop(), clock=clock)
    await dataplane.load_preloaded()
    yield dataplane
    for entry in dataplane.repository_index():
        with contextlib.suppress(Exception):
            await dataplane.unload_model(entry.name)


@pytest.fixture(params=["rest", "grpc"])
async def edge(request: pytest.FixtureRequest, plane: DataPlane) -> AsyncIterator[Edge]:
    if request.param == "rest":
        transport = httpx.ASGITransport(app=App(plane))
        async with httpx.AsyncClient(transport=transport, base_url="http://podserve") as client:
            yield RestEdge(client)
        return
    server, port = await start_grpc_server(plane, "127.0.0.1", 0, max_message_bytes=1 << 20)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield GrpcEdge(channel)
    finally:
        await stop_grpc_server(server, grace_s=0)


async def test_retry_after_is_the_models_observed_completion_interval(
    edge: Edge, plane: DataPlane, clock: FakeClock
) -> None:
    for _ in range(3):  # one completion every 5 s
        outcome = await edge.infer("double", X)
        assert outcome.status == 200, outcome
        clock.advance(5.0)
    plane.begin_drain()
    outcome = await edge.infer("double", X)
    assert outcome.status == 503, outcome
    assert outcome.retry_after == "5"
    # a model this pod has not completed a request of: the 1 s floor
    never = await edge.infer("gated", X)
    assert (never.status, never.retry_after) == (503, "1")
    refused = {"model": "double", "reason": "draining"}
    assert metric(plane, "podserve_rejected_requests_total", refused) == 1
