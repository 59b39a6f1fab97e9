"""One table of scenarios — drain, deadline, queue full, bad input, unknown model,
cancel — run through REST and through gRPC against the real data plane. Each edge must
give the same answer: that is the point of having one data plane."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import httpx
import numpy as np
import pytest

from podserve.dataplane import DataPlane
from podserve.server.app import App
from podserve.server.grpc import start_grpc_server, stop_grpc_server
from tests.middle.conftest import eventually, gate, metric
from tests.middle.edges import Edge, GrpcEdge, RestEdge

X = np.array([[1.0, 2.0, 3.0]], dtype=np.float32)


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


async def occupy(edge: Edge, model: str) -> asyncio.Task[object]:
    """Close the model's gate and send a request that waits at it: the model's one
    instance is busy, so the next request queues."""
    g = gate(model)
    g.open.clear()
    g.entered.clear()
    busy = asyncio.ensure_future(edge.infer(model, X))
    await eventually(g.entered.is_set, f"{model} to be busy")
    return busy


async def release(model: str, busy: asyncio.Task[object]) -> None:
    gate(model).open.set()
    await asyncio.wait_for(busy, 10)


# --------------------------------------------------------------------------- scenarios


async def served(edge: Edge, plane: DataPlane) -> None:
    outcome = await edge.infer("double", X)
    assert outcome.status == 200, outcome
    assert outcome.y == [2.0, 4.0, 6.0]


async def draining(edge: Edge, plane: DataPlane) -> None:
    plane.begin_drain()
    outcome = await edge.infer("double", X)
    assert outcome.status == 503, outcome
    assert "draining" in outcome.message
    assert outcome.retry_after == "1"
    if edge.name == "rest":
        assert outcome.connection_close
    assert metric(plane, "podserve_rejected_requests_total", {"reason": "draining"}) == 1


async def deadline_in_triton_microseconds(edge: Edge, plane: DataPlane) -> None:
    """`timeout` is Triton's, in microseconds: 50_000 is 50 ms, not 13.9 hours. The
    request queues behind a busy instance, its deadline passes, it is never computed."""
    busy = await occupy(edge, "gated")
    outcome = await asyncio.wait_for(edge.infer("gated", X, timeout_us=50_000), 10)
    assert outcome.status == 504, outcome
    assert "deadline" in outcome.message
    await release("gated", busy)
    assert gate("gated").calls == 1  # only the request that held the gate ran
    assert metric(plane, "podserve_rejected_requests_total", {"reason": "deadline"}) == 1


async def deadline_from_the_model_default(edge: Edge, plane: DataPlane) -> None:
    """No timeout in the request: the model's `limits.default_timeout_s` (50 ms) applies,
    on every edge."""
    busy = await occupy(edge, "gated_default")
    outcome = await asyncio.wait_for(edge.infer("gated_default", X), 10)
    assert outcome.status == 504, outcome
    # a long Triton timeout wins over the model default: the request waits its turn
    patient = asyncio.ensure_future(edge.infer("gated_default", X, timeout_us=30_000_000))
    await eventually(
        lambda: metric(plane, "podserve_queue_depth", {"model": "gated_default"}) == 1,
        "the patient request to queue",
    )
    await release("gated_default", busy)
    assert (await asyncio.wait_for(patient, 10)).status == 200


async def queue_full(edge: Edge, plane: DataPlane) -> None:
    busy = await occupy(edge, "gated")
    queued = asyncio.ensure_future(edge.infer("gated", X))
    await eventually(
        lambda: metric(plane, "podserve_queue_depth", {"model": "gated"}) == 1, "a queued request"
    )
    outcome = await edge.infer("gated", X)
    assert outcome.status == 503, outcome
    assert "queue is full" in outcome.message
    assert outcome.retry_after is not None
    assert int(outcome.retry_after) >= 1
    await release("gated", busy)
    assert (await asyncio.wait_for(queued, 10)).status == 200


async def bad_input(edge: Edge, plane: DataPlane) -> None:
    outcome = await edge.infer("double", np.zeros((1, 4), dtype=np.float32))
    assert outcome.status == 400, outcome
    assert "input 'x' has shape [1, 4]" in outcome.message


async def unknown_model(edge: Edge, plane: DataPlane) -> None:
    outcome = await edge.infer("nope", X)
    assert outcome.status == 404, outcome
    assert "unknown model: 'nope'" in outcome.message


async def cancel(edge: Edge, plane: DataPlane) -> None:
    """A client that leaves takes its queued request out of the queue: it is never
    computed, and its slot is free at once."""
    busy = await occupy(edge, "gated")
    leaving = asyncio.ensure_future(edge.infer("gated", X))
    await eventually(
        lambda: metric(plane, "podserve_queue_depth", {"model": "gated"}) == 1, "a queued request"
    )
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    await eventually(
        lambda: metric(plane, "podserve_queue_depth", {"model": "gated"}) == 0,
        "the cancelled request to leave the queue",
    )
    await release("gated", busy)
    assert gate("gated").calls == 1
    await eventually(lambda: plane.inflight == 0, "nothing in flight")


SCENARIOS: dict[str, Callable[[Edge, DataPlane], Awaitable[None]]] = {
    "served": served,
    "draining": draining,
    "deadline_in_triton_microseconds": deadline_in_triton_microseconds,
    "deadline_from_the_model_default": deadline_from_the_model_default,
    "queue_full": queue_full,
    "bad_input": bad_input,
    "unknown_model": unknown_model,
    "cancel": cancel,
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_scenario(scenario: str, edge: Edge, plane: DataPlane) -> None:
    await SCENARIOS[scenario](edge, plane)
