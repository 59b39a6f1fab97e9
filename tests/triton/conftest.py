"""One real podserve process for the Triton drop-in tests: the `simple` and
`simple_string` example models and the bundled tiny language model, REST and gRPC on
free ports, with tritonclient (http, grpc and their asyncio variants) as the client.

Shared-memory regions are created the way Triton's client programs create them, with
tritonclient.utils.shared_memory, under keys unique to each test; every test leaves the
server with no region registered and /dev/shm as it found it."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm

from tests.support.server import ServerProcess, wait_until

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"


@pytest.fixture(scope="package")
def server() -> Iterator[ServerProcess]:
    with ServerProcess(
        "--model",
        f"simple={EXAMPLES / 'simple'}",
        "--model",
        f"simple_string={EXAMPLES / 'simple_string'}",
        "--model",
        f"tiny-lm={EXAMPLES / 'tiny-lm'}",
        grpc=True,
        env={"HF_HUB_OFFLINE": "1"},
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield process


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpclient.InferenceServerClient]:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    yield client
    client.close()


@pytest.fixture
def grpc(server: ServerProcess) -> Iterator[grpcclient.InferenceServerClient]:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    yield client
    client.close()


class Regions:
    """Client-side regions of one test, as Triton's examples make them."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex[:10]
        self.handles: dict[str, Any] = {}
        self.keys: dict[str, str] = {}

    def create(self, name: str, byte_size: int) -> str:
        """Create region `name` of `byte_size` bytes; returns its key."""
        key = f"/podserve_test_{self.tag}_{name}"
        self.handles[name] = shm.create_shared_memory_region(name, key, byte_size)
        self.keys[name] = key
        return key

    def put(self, name: str, *arrays: np.ndarray, offset: int = 0) -> None:
        shm.set_shared_memory_region(self.handles[name], list(arrays), offset=offset)

    def get(self, name: str, dtype: Any, shape: list[int], offset: int = 0) -> np.ndarray:
        contents: np.ndarray = shm.get_contents_as_numpy(  # tritonclient is untyped
            self.handles[name], dtype, shape, offset=offset
        )
        return contents

    def path(self, name: str) -> Path:
        return Path("/dev/shm") / self.keys[name].lstrip("/")

    def destroy(self) -> None:
        for handle in self.handles.values():
            shm.destroy_shared_memory_region(handle)
        self.handles.clear()


@pytest.fixture
def regions(http: httpclient.InferenceServerClient) -> Iterator[Regions]:
    made = Regions()
    try:
        yield made
    finally:
        http.unregister_system_shared_memory()
        made.destroy()
