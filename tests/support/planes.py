"""An in-process data plane over real bundled models, reached through both real edges:
REST as the ASGI app through `httpx.ASGITransport`, gRPC as the real grpc.aio server on
127.0.0.1:0 through the generated stub (which exposes status codes and trailing metadata).
`loopback` serves the same app over real HTTP instead: the pod's uvicorn settings on a
socket on 127.0.0.1, in the test's own event loop, so a test can hold a call inside the
pod at a gate (tests/support/gate.py) and still talk to the pod through its sockets.

Models: "iris" (scikit-learn), "minilm" (the embedding runtime), "tiny-lm" (the in-house
generation engine), all from examples/models, and "double" (the fake runtime, y = 2x on
an FP32 [-1, 3] input).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import httpx

from podserve.config.settings import ServerSettings
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from podserve.server.app import App
from podserve.server.grpc import start_grpc_server, stop_grpc_server
from podserve.server.grpc._generated import inference_pb2_grpc as pb_grpc
from podserve.server.http_server import HttpServer
from podserve.server.runner import http_config
from tests.support.server import write_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"


@dataclass
class Edges:
    plane: DataPlane
    rest: httpx.AsyncClient
    grpc: pb_grpc.GRPCInferenceServiceStub


def repository(root: Path, examples: tuple[str, ...]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in examples:
        (root / name).symlink_to(EXAMPLES / name, target_is_directory=True)
    write_model(root, "double", warmup=False)
    return root


@contextlib.asynccontextmanager
async def _loaded(
    tmp: Path, examples: tuple[str, ...], settings: dict[str, object]
) -> AsyncIterator[tuple[ServerSettings, DataPlane]]:
    config = ServerSettings(
        model_repository=repository(tmp / "models", examples),
        cache_dir=tmp / "cache",
        grpc_port=-1,
        **settings,  # type: ignore[arg-type]  # keyword settings, validated by pydantic
    )
    plane = build_dataplane(config, asyncio.get_running_loop())
    await plane.load_preloaded()
    assert plane.startup().ok, plane.startup()
    try:
        yield config, plane
    finally:
        for entry in plane.repository_index():
            with contextlib.suppress(Exception):
                await plane.unload_model(entry.name)
        await plane.close()


@contextlib.asynccontextmanager
async def edges(
    tmp: Path, examples: tuple[str, ...] = ("iris", "minilm", "tiny-lm"), **settings: object
) -> AsyncIterator[Edges]:
    async with _loaded(tmp, examples, settings) as (_, plane):
        server, port = await start_grpc_server(plane, "127.0.0.1", 0, max_message_bytes=1 << 22)
        app = App(plane)
        transport = httpx.ASGITransport(app=app)
        try:
            async with (
                httpx.AsyncClient(transport=transport, base_url="http://podserve") as rest,
                grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
            ):
                yield Edges(plane, rest, pb_grpc.GRPCInferenceServiceStub(channel))
        finally:
            await stop_grpc_server(server, grace_s=0)
            app.close()


@dataclass
class Loopback:
    plane: DataPlane
    http: httpx.AsyncClient  # to the app's real HTTP server on 127.0.0.1


@contextlib.asynccontextmanager
async def loopback(
    tmp: Path, examples: tuple[str, ...] = ("minilm", "tiny-lm"), **settings: object
) -> AsyncIterator[Loopback]:
    async with _loaded(tmp, examples, settings) as (config, plane):
        app = App(plane)
        server = HttpServer(http_config(config, app))
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        host, port = sock.getsockname()
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        try:
            async with httpx.AsyncClient(base_url=f"http://{host}:{port}", timeout=30) as http:
                yield Loopback(plane, http)
        finally:
            server.exit_now()
            await serving
            app.close()
