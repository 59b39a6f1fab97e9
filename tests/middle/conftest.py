"""The middle tier: the real `DataPlane` (real repository, lifecycle, workers, batcher)
over in-process models, reached through the real edges, in process.

REST: the ASGI app through `httpx.ASGITransport`. gRPC: the real grpc.aio server on
127.0.0.1:0 with tritonclient's asyncio client. No subprocess, no fake data plane.

Models: "double" (the fake runtime, y = 2x); "gated" and "gated_default" (`GatedModel`:
one instance, no batching, a queue of one; "gated_default" has a 50 ms default timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import tritonclient.grpc.aio as triton_aio
from prometheus_client.parser import text_string_to_metric_families

from podserve.config.settings import ServerSettings
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from podserve.server.app import App
from podserve.server.grpc import start_grpc_server, stop_grpc_server
from tests.middle.gated import GATES, Gate
from tests.support.server import write_model

GATED: dict[str, Any] = {
    "runtime": "custom",
    "model_class": "tests.middle.gated:GatedModel",
    "batching": {"enabled": False},
    "warmup": False,
}


def make_repository(root: Path) -> Path:
    write_model(root, "double", warmup=False)
    write_model(root, "gated", limits={"max_queue": 1}, **GATED)
    write_model(root, "gated_default", limits={"max_queue": 4, "default_timeout_s": 0.05}, **GATED)
    return root


@pytest.fixture
async def plane(tmp_path: Path) -> AsyncIterator[DataPlane]:
    GATES.clear()
    settings = ServerSettings(
        model_repository=make_repository(tmp_path / "models"),
        cache_dir=tmp_path / "cache",
        grpc_port=-1,
        max_queue=8,
    )
    dataplane = build_dataplane(settings, asyncio.get_running_loop())
    await dataplane.load_preloaded()
    assert dataplane.startup().ok, dataplane.startup()
    yield dataplane
    for gate in GATES.values():
        gate.open.set()
    for entry in dataplane.repository_index():
        with contextlib.suppress(Exception):
            await dataplane.unload_model(entry.name)


@pytest.fixture
async def rest(plane: DataPlane) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=App(plane))
    async with httpx.AsyncClient(transport=transport, base_url="http://podserve") as client:
        yield client


@pytest.fixture
async def grpc_client(plane: DataPlane) -> AsyncIterator[triton_aio.InferenceServerClient]:
    server, port = await start_grpc_server(plane, "127.0.0.1", 0, max_message_bytes=1 << 20)
    try:
        async with triton_aio.InferenceServerClient(f"127.0.0.1:{port}") as client:
            yield client
    finally:
        await stop_grpc_server(server, grace_s=0)


def gate(name: str) -> Gate:
    return GATES[name]


def metric(plane: DataPlane, name: str, labels: dict[str, str]) -> float | None:
    """One sample of the data plane's exposition, read by Prometheus's own parser."""
    text, _ = plane.metrics_exposition()
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return float(sample.value)
    return None


async def eventually(predicate: Callable[[], bool], what: str, timeout_s: float = 10) -> None:
    """Wait for a real condition (a gauge, a gate) to hold, polling the event loop."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.005)
