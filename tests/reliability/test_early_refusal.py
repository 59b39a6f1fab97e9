"""A tensor request to a model whose queue is full is refused before its body is read
(issue 15 item 9): the refusal costs no body read and no decode. Measured under 10x
overload by benchmarks/overload.py; this test shows the order of events."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, MutableMapping
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest_asyncio

from podserve.config.settings import ServerSettings
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from podserve.server.app import App
from tests.middle.conftest import eventually, make_repository
from tests.middle.gated import GATES

BODY = orjson.dumps(
    {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}
)


@pytest_asyncio.fixture
async def plane(tmp_path: Path) -> AsyncIterator[DataPlane]:
    GATES.clear()
    settings = ServerSettings(
        model_repository=make_repository(tmp_path / "models"),
        cache_dir=tmp_path / "cache",
        grpc_port=-1,
    )
    dataplane = build_dataplane(settings, asyncio.get_running_loop())
    await dataplane.load_preloaded()
    yield dataplane
    for gate in GATES.values():
        gate.open.set()
    for entry in dataplane.repository_index():
        with contextlib.suppress(Exception):
            await dataplane.unload_model(entry.name)


def queue_depth(plane: DataPlane, model: str) -> int:
    return next(m.queue_depth for m in plane.serving_state().models if m.name == model)


async def test_a_full_queue_refuses_before_reading_the_body(plane: DataPlane) -> None:
    app = App(plane)
    gate = GATES["gated"]  # one instance, max_queue 1
    gate.open.clear()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://podserve"
    ) as client:
        running = asyncio.ensure_future(client.post("/v2/models/gated/infer", content=BODY))
        await eventually(gate.entered.is_set, "the instance to be busy")
        queued = asyncio.ensure_future(client.post("/v2/models/gated/infer", content=BODY))
        await eventually(lambda: queue_depth(plane, "gated") == 1, "a queued request")

        reads: list[str] = []
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            reads.append("body")
            return {"type": "http.request", "body": BODY, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            sent.append(dict(message))

        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v2/models/gated/infer",
            "headers": [(b"content-length", str(len(BODY)).encode())],
        }
        await app(scope, receive, send)
        assert sent[0]["status"] == 503
        assert b"queue is full" in sent[1]["body"]
        assert (b"retry-after", b"1") in sent[0]["headers"]
        assert reads == []  # refused unread

        gate.open.set()
        assert (await running).status_code == 200
        assert (await queued).status_code == 200
