"""Triton's system shared-memory extension on both edges, driven the way Triton's shm
client programs drive it: regions made with tritonclient.utils.shared_memory,
registered, named by inputs and outputs, read back from the client's own mapping,
reused with and without shared memory, bounds-checked, unregistered. The server's
mappings are read from its /proc/<pid>/maps, so "unmapped" means the kernel says so."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio
import tritonclient.utils as utils
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess
from tests.triton.conftest import Regions

A = np.arange(16, dtype=np.int32)
B = np.ones(16, dtype=np.int32)
BYTE_SIZE = A.nbytes
EDGES = ["http", "grpc"]


@pytest.fixture(params=EDGES)
def edge(
    request: pytest.FixtureRequest,
    http: httpclient.InferenceServerClient,
    grpc: grpcclient.InferenceServerClient,
) -> tuple[Any, Any]:
    """(client, its tritonclient module) for each edge."""
    if request.param == "http":
        return http, httpclient
    return grpc, grpcclient


def _server_maps(server: ServerProcess) -> str:
    assert server.proc is not None
    return Path(f"/proc/{server.proc.pid}/maps").read_text()


def _status(client: Any, name: str = "") -> list[dict[str, Any]]:
    """The status as plain dicts, whichever edge answered."""
    if isinstance(client, httpclient.InferenceServerClient):
        return list(client.get_system_shared_memory_status(name))
    answer = client.get_system_shared_memory_status(name, as_json=True)
    # protobuf's JSON leaves out fields at their default (an offset of 0) and writes
    # 64-bit integers as strings.
    return [
        {k: int(v) if k in ("offset", "byte_size") else v for k, v in {"offset": 0, **r}.items()}
        for r in answer.get("regions", {}).values()
    ]


def _register_simple_regions(client: Any, regions: Regions) -> None:
    for name in ("input0_data", "input1_data", "output0_data", "output1_data"):
        client.register_system_shared_memory(name, regions.create(name, BYTE_SIZE), BYTE_SIZE)
    regions.put("input0_data", A)
    regions.put("input1_data", B)


def _shm_request(module: Any) -> tuple[list[Any], list[Any]]:
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("input0_data", BYTE_SIZE)
    inputs[1].set_shared_memory("input1_data", BYTE_SIZE)
    outputs = [module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("output0_data", BYTE_SIZE)
    outputs[1].set_shared_memory("output1_data", BYTE_SIZE)
    return inputs, outputs


def _output_meta(result: Any, name: str) -> tuple[str, list[int]]:
    output = result.get_output(name)
    if isinstance(output, dict):
        return output["datatype"], list(output["shape"])
    return output.datatype, list(output.shape)


def test_inputs_and_outputs_in_shared_memory(
    edge: tuple[Any, Any], regions: Regions, server: ServerProcess
) -> None:
    client, module = edge
    client.unregister_system_shared_memory()
    client.unregister_cuda_shared_memory()
    _register_simple_regions(client, regions)
    assert str(regions.path("input0_data")) in _server_maps(server)

    inputs, outputs = _shm_request(module)
    result = client.infer("simple", inputs, outputs=outputs)
    for name, expected in (("OUTPUT0", A + B), ("OUTPUT1", A - B)):
        datatype, shape = _output_meta(result, name)
        assert (datatype, shape) == ("INT32", [1, 16])
        got = regions.get(f"output{name[-1]}_data", utils.triton_to_np_dtype(datatype), shape)
        np.testing.assert_array_equal(got[0], expected)

    # The server reads the region at inference time, not at registration.
    regions.put("input1_data", B * 5)
    client.infer("simple", inputs, outputs=outputs)
    np.testing.assert_array_equal(regions.get("output0_data", np.int32, [1, 16])[0], A + 5 * B)

    listed = _status(client)
    assert sorted(r["name"] for r in listed) == [
        "input0_data",
        "input1_data",
        "output0_data",
        "output1_data",
    ]
    assert _status(client, "input0_data") == [
        {"name": "input0_data", "key": regions.keys["input0_data"], "offset": 0, "byte_size": 64}
    ]

    client.unregister_system_shared_memory("input0_data")
    assert "input0_data" not in [r["name"] for r in _status(client)]
    assert str(regions.path("input0_data")) not in _server_maps(server)
    client.unregister_system_shared_memory()
    assert _status(client) == []
    assert not any(str(regions.path(n)) in _server_maps(server) for n in regions.keys)


def test_the_same_objects_with_and_without_shared_memory(
    edge: tuple[Any, Any], regions: Regions
) -> None:
    """reuse_infer_objects_client's flow: one set of InferInput/InferRequestedOutput
    objects, switched between shared memory and data in the request."""
    client, module = edge
    _register_simple_regions(client, regions)
    inputs, outputs = _shm_request(module)
    for use_shm in (True, False, True):
        if use_shm:
            inputs[0].set_shared_memory("input0_data", BYTE_SIZE)
            inputs[1].set_shared_memory("input1_data", BYTE_SIZE)
            outputs[0].set_shared_memory("output0_data", BYTE_SIZE)
            outputs[1].set_shared_memory("output1_data", BYTE_SIZE)
            second = B
        else:
            second = B * 2
            inputs[0].set_data_from_numpy(A.reshape(1, 16))
            inputs[1].set_data_from_numpy(second.reshape(1, 16))
            outputs[0].unset_shared_memory()
            outputs[1].unset_shared_memory()
        result = client.infer("simple", inputs, outputs=outputs)
        if use_shm:
            total = regions.get("output0_data", np.int32, [1, 16])
            difference = regions.get("output1_data", np.int32, [1, 16])
        else:
            total, difference = result.as_numpy("OUTPUT0"), result.as_numpy("OUTPUT1")
        np.testing.assert_array_equal(total[0], A + second)
        np.testing.assert_array_equal(difference[0], A - second)


def test_strings_and_offsets_in_one_region(edge: tuple[Any, Any], regions: Regions) -> None:
    """simple_*_shm_string_client's flow, with both inputs in one region at offsets."""
    client, module = edge
    texts = [
        np.array([str(v).encode() for v in values], dtype=object).reshape(1, 16)
        for values in (A, B)
    ]
    wire = [utils.serialize_byte_tensor(t) for t in texts]
    sizes = [utils.serialized_byte_size(w) for w in wire]
    key = regions.create("strings_in", sum(sizes))
    regions.put("strings_in", *wire)
    client.register_system_shared_memory("strings_in", key, sum(sizes))
    out_key = regions.create("strings_out", 1024)
    client.register_system_shared_memory("strings_out", out_key, 1024)

    inputs = [module.InferInput(n, [1, 16], "BYTES") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_shared_memory("strings_in", sizes[0])
    inputs[1].set_shared_memory("strings_in", sizes[1], offset=sizes[0])
    outputs = [module.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    outputs[0].set_shared_memory("strings_out", 512)
    outputs[1].set_shared_memory("strings_out", 512, offset=512)
    result = client.infer("simple_string", inputs, outputs=outputs)
    datatype, shape = _output_meta(result, "OUTPUT0")
    assert (datatype, shape) == ("BYTES", [1, 16])
    total = regions.get("strings_out", np.object_, shape)
    difference = regions.get("strings_out", np.object_, shape, offset=512)
    assert [int(v) for v in total.ravel()] == (A + B).tolist()
    assert [int(v) for v in difference.ravel()] == (A - B).tolist()


def _error(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def _code(client: Any, http_status: str, grpc_status: str) -> str:
    return http_status if isinstance(client, httpclient.InferenceServerClient) else grpc_status


def test_bounds_and_names_are_checked(edge: tuple[Any, Any], regions: Regions) -> None:
    client, module = edge
    _register_simple_regions(client, regions)
    # A window past the end of the object is refused at registration.
    big = regions.create("big", 128)
    error = _error(lambda: client.register_system_shared_memory("too_far", big, 64, offset=100))
    assert "failed to register shared memory region 'too_far'" in error.message()
    assert error.status() == _code(client, "400", "StatusCode.INVALID_ARGUMENT")
    # A name registered twice.
    error = _error(lambda: client.register_system_shared_memory("input0_data", big, 64))
    assert error.message() == "shared memory region 'input0_data' already in manager"
    assert error.status() == _code(client, "400", "StatusCode.ALREADY_EXISTS")
    # An input reaching past the registered size.
    inputs, outputs = _shm_request(module)
    inputs[0].set_shared_memory("input0_data", BYTE_SIZE, offset=4)
    error = _error(lambda: client.infer("simple", inputs, outputs=outputs))
    assert "Invalid offset + byte size for shared memory region: 'input0_data'" in error.message()
    assert error.status() == _code(client, "400", "StatusCode.INVALID_ARGUMENT")
    # A size that does not match the shape.
    inputs[0].set_shared_memory("input0_data", BYTE_SIZE - 4)
    error = _error(lambda: client.infer("simple", inputs, outputs=outputs))
    assert "needs 64 bytes, shared_memory_byte_size gives 60" in error.message()
    # An output region too small for the result.
    inputs, outputs = _shm_request(module)
    outputs[0].set_shared_memory("output0_data", 32)
    error = _error(lambda: client.infer("simple", inputs, outputs=outputs))
    assert "should be at least 64 bytes to hold the results" in error.message()
    # Regions that are not registered.
    inputs, outputs = _shm_request(module)
    inputs[1].set_shared_memory("never_registered", BYTE_SIZE)
    error = _error(lambda: client.infer("simple", inputs, outputs=outputs))
    assert error.message() == "Unable to find shared memory region: 'never_registered'"
    assert error.status() == _code(client, "404", "StatusCode.NOT_FOUND")
    error = _error(lambda: client.get_system_shared_memory_status("never_registered"))
    assert error.message() == "Unable to find system shared memory region: 'never_registered'"
    client.unregister_system_shared_memory("never_registered")  # a no-op, as in Triton


def test_a_key_that_does_not_exist_is_a_clear_400(edge: tuple[Any, Any]) -> None:
    client, _ = edge
    error = _error(lambda: client.register_system_shared_memory("r", "/podserve_no_such_key", 64))
    assert error.message().startswith(
        "Unable to open shared memory region: '/podserve_no_such_key'"
    )
    assert error.status() == _code(client, "400", "StatusCode.INVALID_ARGUMENT")
    error = _error(lambda: client.register_system_shared_memory("r", "/../etc/passwd", 64))
    assert "invalid shared memory key" in error.message()


def test_cuda_shared_memory_answers_as_triton_without_gpus(edge: tuple[Any, Any]) -> None:
    client, _ = edge
    client.unregister_cuda_shared_memory()
    client.unregister_cuda_shared_memory("anything")
    # What cuda_shared_memory.get_raw_handle gives: a base64 cudaIpcMemHandle_t (64 bytes),
    # as str for the HTTP client's JSON body and as bytes for the gRPC client.
    handle = base64.b64encode(bytes(64))
    raw = handle.decode() if isinstance(client, httpclient.InferenceServerClient) else handle
    error = _error(lambda: client.register_cuda_shared_memory("gpu0", raw, 0, 64))
    assert error.message() == (
        "failed to register CUDA shared memory region: 'gpu0', GPUs not supported"
    )
    assert error.status() == _code(client, "400", "StatusCode.INVALID_ARGUMENT")
    status = client.get_cuda_shared_memory_status()
    if isinstance(client, httpclient.InferenceServerClient):
        assert status == []
    else:
        assert len(status.regions) == 0
    error = _error(lambda: client.get_cuda_shared_memory_status("gpu0"))
    assert error.message() == "Unable to find cuda shared memory region: 'gpu0'"


def test_server_metadata_lists_exactly_what_is_implemented(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    rest = set(http.get_server_metadata()["extensions"])
    assert set(grpc.get_server_metadata().extensions) == rest
    assert {"system_shared_memory", "binary_tensor_data", "generate"} <= rest
    # Registering a CUDA region always fails here, so the extension is not claimed.
    assert "cuda_shared_memory" not in rest


async def test_the_asyncio_clients_drive_shared_memory_too(
    server: ServerProcess, regions: Regions
) -> None:
    """simple_*_aio_shm_client's flow on both edges."""
    http_url, grpc_url = f"127.0.0.1:{server.http_port}", f"127.0.0.1:{server.grpc_port}"
    async with (
        http_aio.InferenceServerClient(http_url) as http,
        grpc_aio.InferenceServerClient(grpc_url) as grpc,
    ):
        for client, module in ((http, http_aio), (grpc, grpc_aio)):
            await client.unregister_system_shared_memory()
            for name in ("input0_data", "input1_data", "output0_data", "output1_data"):
                key = regions.keys.get(name) or regions.create(name, BYTE_SIZE)
                await client.register_system_shared_memory(name, key, BYTE_SIZE)
            regions.put("input0_data", A)
            regions.put("input1_data", B * 3)
            inputs, outputs = _shm_request(module)
            await client.infer("simple", inputs, outputs=outputs)
            np.testing.assert_array_equal(
                regions.get("output1_data", np.int32, [1, 16])[0], A - 3 * B
            )
            status = await client.get_system_shared_memory_status()
            assert len(status if isinstance(status, list) else status.regions) == 4
            await client.unregister_system_shared_memory()


def test_region_names_may_hold_a_slash(edge: tuple[Any, Any], regions: Regions) -> None:
    client, _ = edge
    key = regions.create("slashed", 64)
    client.register_system_shared_memory("team/a", key, 64)
    assert [r["name"] for r in _status(client, "team/a")] == ["team/a"]
    client.unregister_system_shared_memory("team/a")
    assert _status(client) == []
