"""An in-process data plane over real bundled models, reached through both real edges:
REST as the ASGI app through `httpx.ASGITransport`, gRPC as the real grpc.aio server on
127.0.0.1:0 through the generated stub (which exposes status codes and trailing metadata).

Models: "iris" (scikit-learn), "minilm" (the embedding runtime), "tiny-lm" (the in-house
generation engine), all from examples/models, and "double" (the fake runtime, y = 2x on
an FP32 [-1, 3] input).
"""

from __future__ import annotations

import asyncio
import contextlib
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
async def edges(
    tmp: Path, examples: tuple[str, ...] = ("iris", "minilm", "tiny-lm"), **settings: object
) -> AsyncIterator[Edges]:
    config = ServerSettings(
        model_repository=repository(tmp / "models", examples),
        cache_dir=tmp / "cache",
        grpc_port=-1,
        **settings,  # type: ignore[arg-type]  # keyword settings, validated by pydantic
    )
    plane = build_dataplane(config, asyncio.get_running_loop())
    await plane.load_preloaded()
    assert plane.startup().ok, plane.startup()
    server, port = await start_grpc_server(plane, "127.0.0.1", 0, max_message_bytes=1 << 22)
    transport = httpx.ASGITransport(app=App(plane))
    try:
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://podserve") as rest,
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            yield Edges(plane, rest, pb_grpc.GRPCInferenceServiceStub(channel))
    finally:
        await stop_grpc_server(server, grace_s=0)
        for entry in plane.repository_index():
            with contextlib.suppress(Exception):
                await plane.unload_model(entry.name)
        await plane.close()
