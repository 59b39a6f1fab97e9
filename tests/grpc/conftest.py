"""Fixtures: the fake data plane, a real grpc.aio server on 127.0.0.1:0 serving it, and
the real tritonclient gRPC (asyncio) client connected to that server."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import tritonclient.grpc.aio as triton_aio

from podserve.server.grpc import start_grpc_server, stop_grpc_server
from tests.grpc.fake_dataplane import FakeDataPlane

MAX_MESSAGE_BYTES = 1 << 20


@pytest.fixture
def fake() -> FakeDataPlane:
    return FakeDataPlane()


@pytest.fixture
async def grpc_port(fake: FakeDataPlane) -> AsyncIterator[int]:
    server, port = await start_grpc_server(
        fake, "127.0.0.1", 0, max_message_bytes=MAX_MESSAGE_BYTES
    )
    yield port
    await stop_grpc_server(server, grace_s=0)


@pytest.fixture
async def client(grpc_port: int) -> AsyncIterator[triton_aio.InferenceServerClient]:
    async with triton_aio.InferenceServerClient(f"127.0.0.1:{grpc_port}") as triton:
        yield triton
