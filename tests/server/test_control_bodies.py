"""Control requests and binary BYTES tensors on a real `podserve serve` process, with
httpx and tritonclient.http: what a client sizes is bounded before the pod spends memory
or event-loop time on it.

- The bodies of `POST /v2/repository/index` and of the shared-memory extension's
  register and unregister are capped (server/http.py CONTROL_BODY_BYTES): 413.
- Registered shared-memory regions are capped (shm/regions.py): 400 naming the limit.
- A binary BYTES tensor holds at most MAX_BYTES_ELEMENTS elements per request
  (protocol/v2/raw.py): 400 naming the input, before a byte of it is split.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from podserve.protocol.v2.raw import MAX_BYTES_ELEMENTS
from podserve.server.http import CONTROL_BODY_BYTES
from podserve.shm.regions import default_max_regions
from tests.support.server import ServerProcess, wait_until

pytestmark = pytest.mark.slow

MODELS = Path(__file__).resolve().parents[2] / "examples" / "models"
# An ignored member that makes a body just past the cap, the rest of it valid.
PADDING = "u" * CONTROL_BODY_BYTES


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    args = ("--model", f"simple_string={MODELS / 'simple_string'}")
    with ServerProcess(*args) as pod:
        wait_until(lambda: pod.get("/ready").status_code == 200, 120, "simple_string loaded")
        yield pod


@pytest.fixture
def segment() -> Iterator[shared_memory.SharedMemory]:
    shm = shared_memory.SharedMemory(f"podserve-test-{uuid.uuid4().hex[:8]}", create=True, size=64)
    try:
        yield shm
    finally:
        shm.close()
        shm.unlink()


def test_a_repository_index_body_past_the_cap_is_refused_413(server: ServerProcess) -> None:
    with server.client() as client:
        small = client.post("/v2/repository/index", json={"ready": True})
        big = client.post("/v2/repository/index", json={"ready": True, "x": PADDING})
    assert small.status_code == 200
    assert big.status_code == 413
    assert big.json()["error"] == (
        f"a repository index request body is at most {CONTROL_BODY_BYTES} bytes"
    )


@pytest.mark.parametrize("action", ["register", "unregister"])
def test_a_shared_memory_body_past_the_cap_is_refused_413(
    server: ServerProcess, segment: shared_memory.SharedMemory, action: str
) -> None:
    body = {"key": f"/{segment.name}", "byte_size": 64, "x": PADDING}
    with server.client() as client:
        response = client.post(f"/v2/systemsharedmemory/region/capped/{action}", json=body)
        assert client.get("/v2/systemsharedmemory/status").json() == []
    assert response.status_code == 413
    assert (
        f"shared memory {action} request body is at most {CONTROL_BODY_BYTES} bytes"
        in (response.json()["error"])
    )


def test_registered_regions_are_capped(
    server: ServerProcess, segment: shared_memory.SharedMemory
) -> None:
    limit = default_max_regions()  # the server's: the same descriptor limit as this test's
    body = {"key": f"/{segment.name}", "byte_size": 64}
    with server.client() as client:
        try:
            for index in range(limit):
                ok = client.post(f"/v2/systemsharedmemory/region/r{index}/register", json=body)
                assert ok.status_code == 200, ok.text
            refused = client.post("/v2/systemsharedmemory/region/one-more/register", json=body)
            assert len(client.get("/v2/systemsharedmemory/status").json()) == limit
        finally:
            assert client.post("/v2/systemsharedmemory/unregister").status_code == 200
        again = client.post("/v2/systemsharedmemory/region/one-more/register", json=body)
        client.post("/v2/systemsharedmemory/unregister")
    assert refused.status_code == 400
    assert f"max_regions={limit}" in refused.json()["error"]
    assert "'one-more'" in refused.json()["error"]
    assert again.status_code == 200  # unregistering frees the places
    assert server.get("/healthz").status_code == 200


def bytes_inputs(rows: int, binary: bool = True) -> list[triton.InferInput]:
    values = np.array([b""] * (rows * 16), dtype=np.object_).reshape(rows, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = triton.InferInput(name, [rows, 16], "BYTES")
        tensor.set_data_from_numpy(values, binary_data=binary)
        inputs.append(tensor)
    return inputs


def test_binary_bytes_past_the_element_bound_are_refused_naming_the_input(
    server: ServerProcess,
) -> None:
    """tritonclient's binary BYTES, the probe's shape: 2 x 2M empty strings, 16 MB."""
    client = triton.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    rows = 2 * MAX_BYTES_ELEMENTS // 16
    with pytest.raises(InferenceServerException) as refused:
        client.infer("simple_string", bytes_inputs(rows))
    client.close()
    assert refused.value.status() == "400"
    assert f"input 'INPUT0': shape [{rows}, 16] holds {rows * 16} BYTES elements" in str(
        refused.value
    )
    assert f"at most {MAX_BYTES_ELEMENTS}" in str(refused.value)


def test_binary_bytes_inputs_share_one_bound(server: ServerProcess) -> None:
    """Each input under the bound, the two together over it: the second is refused."""
    rows = MAX_BYTES_ELEMENTS // 16
    data = b"\x00\x00\x00\x00" * (rows * 16)
    header = json.dumps(
        {
            "inputs": [
                {
                    "name": name,
                    "shape": [rows, 16],
                    "datatype": "BYTES",
                    "parameters": {"binary_data_size": len(data)},
                }
                for name in ("INPUT0", "INPUT1")
            ]
        }
    ).encode()
    with server.client() as client:
        response = client.post(
            "/v2/models/simple_string/infer",
            content=header + data + data,
            headers={"inference-header-content-length": str(len(header))},
        )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error.startswith("input 'INPUT1'")
    assert f"other inputs of the request hold {MAX_BYTES_ELEMENTS}" in error


def test_binary_bytes_within_the_bound_are_served(server: ServerProcess) -> None:
    client = triton.InferenceServerClient(f"127.0.0.1:{server.http_port}")
    values = np.array([str(i).encode() for i in range(16)], dtype=np.object_).reshape(1, 16)
    inputs = []
    for name in ("INPUT0", "INPUT1"):
        tensor = triton.InferInput(name, [1, 16], "BYTES")
        tensor.set_data_from_numpy(values, binary_data=True)
        inputs.append(tensor)
    with contextlib.closing(client):
        result = client.infer("simple_string", inputs)
    assert [int(v) for v in result.as_numpy("OUTPUT0").reshape(-1)] == [2 * i for i in range(16)]


def test_grpc_bytes_inputs_share_one_bound_too() -> None:
    """The same request over gRPC's raw_input_contents: the bound was per tensor there,
    so a request of several inputs could hold it several times over."""
    import tritonclient.grpc as triton_grpc

    rows = MAX_BYTES_ELEMENTS // 16
    args = ("--model", f"simple_string={MODELS / 'simple_string'}")
    with ServerProcess(*args, grpc=True) as pod:
        wait_until(lambda: pod.get("/ready").status_code == 200, 120, "simple_string loaded")
        client = triton_grpc.InferenceServerClient(f"127.0.0.1:{pod.grpc_port}")
        empty = np.full((rows, 16), b"", dtype=np.object_)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = triton_grpc.InferInput(name, [rows, 16], "BYTES")
            tensor.set_data_from_numpy(empty)
            inputs.append(tensor)
        with pytest.raises(InferenceServerException) as refused:
            client.infer("simple_string", inputs)
        client.close()
    assert refused.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert "input 'INPUT1'" in str(refused.value)
    assert f"other inputs of the request hold {MAX_BYTES_ELEMENTS}" in str(refused.value)


def test_the_region_cap_is_a_setting(segment: shared_memory.SharedMemory) -> None:
    body = {"key": f"/{segment.name}", "byte_size": 64}
    with ServerProcess("--max-shm-regions", "3") as pod:
        wait_until(lambda: pod.get("/ready").status_code == 200, 120, "ready")
        with pod.client() as client:
            codes = [
                client.post(f"/v2/systemsharedmemory/region/r{i}/register", json=body).status_code
                for i in range(4)
            ]
            refused = client.post("/v2/systemsharedmemory/region/r9/register", json=body)
            client.post("/v2/systemsharedmemory/unregister")
    assert codes == [200, 200, 200, 400]
    assert "max_regions=3" in refused.json()["error"]
