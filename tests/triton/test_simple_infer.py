"""The flows of Triton's `simple` client programs, on both edges, against the real server:
sync and async inference, the asyncio clients, strings, explicit typed gRPC contents,
custom channel arguments and headers, statistics, health and metadata."""

from __future__ import annotations

import queue
from typing import Any

import grpc as grpc_lib
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpc_aio
import tritonclient.http as httpclient
import tritonclient.http.aio as http_aio
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tests.support.server import ServerProcess

A = np.arange(16, dtype=np.int32).reshape(1, 16)
B = np.full((1, 16), -1, dtype=np.int32)


def _inputs(module: Any, a: np.ndarray = A, b: np.ndarray = B, **binary: bool) -> list[Any]:
    first = module.InferInput("INPUT0", list(a.shape), "INT32")
    second = module.InferInput("INPUT1", list(b.shape), "INT32")
    first.set_data_from_numpy(a, **binary)
    second.set_data_from_numpy(b, **binary)
    return [first, second]


def _check_sum_and_difference(result: Any, a: np.ndarray = A, b: np.ndarray = B) -> None:
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
    assert result.as_numpy("OUTPUT0").dtype == np.int32


@pytest.mark.parametrize(
    ("in_binary", "out_binary"), [(False, False), (True, True), (False, True), (True, False)]
)
def test_http_infer_json_and_binary(
    http: httpclient.InferenceServerClient, in_binary: bool, out_binary: bool
) -> None:
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=out_binary) for n in ("OUTPUT0", "OUTPUT1")
    ]
    result = http.infer(
        "simple",
        _inputs(httpclient, binary_data=in_binary),
        outputs=outputs,
        query_params={"test_1": 1, "test_2": 2},
        headers={"test": "1"},
    )
    _check_sum_and_difference(result)
    # Without requested outputs every output comes back.
    _check_sum_and_difference(http.infer("simple", _inputs(httpclient, binary_data=in_binary)))


def test_grpc_infer_with_and_without_requested_outputs(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    outputs = [grpcclient.InferRequestedOutput(n) for n in ("OUTPUT0", "OUTPUT1")]
    _check_sum_and_difference(grpc.infer("simple", _inputs(grpcclient), outputs=outputs))
    _check_sum_and_difference(grpc.infer("simple", _inputs(grpcclient), headers={"test": "1"}))


def test_batches_of_rows_up_to_the_models_max_batch_size(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    a = np.arange(8 * 16, dtype=np.int32).reshape(8, 16)
    b = np.full((8, 16), 3, dtype=np.int32)
    _check_sum_and_difference(http.infer("simple", _inputs(httpclient, a, b)), a, b)
    _check_sum_and_difference(grpc.infer("simple", _inputs(grpcclient, a, b)), a, b)


def test_http_async_infer_in_the_clients_pool(server: ServerProcess) -> None:
    client = httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}", concurrency=4)
    try:
        pending = [client.async_infer("simple", _inputs(httpclient)) for _ in range(4)]
        for request in pending:
            _check_sum_and_difference(request.get_result())
    finally:
        client.close()


def test_grpc_async_infer_with_a_callback(grpc: grpcclient.InferenceServerClient) -> None:
    done: queue.Queue[tuple[Any, Any]] = queue.Queue()
    for _ in range(3):
        grpc.async_infer(
            "simple", _inputs(grpcclient), callback=lambda result, error: done.put((result, error))
        )
    for _ in range(3):
        result, error = done.get(timeout=30)
        assert error is None
        _check_sum_and_difference(result)


async def test_asyncio_clients(server: ServerProcess) -> None:
    async with http_aio.InferenceServerClient(f"127.0.0.1:{server.http_port}") as client:
        assert await client.is_server_live()
        assert await client.is_model_ready("simple")
        _check_sum_and_difference(await client.infer("simple", _inputs(http_aio)))
    async with grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
        assert await client.is_server_ready()
        _check_sum_and_difference(await client.infer("simple", _inputs(grpc_aio)))


def _string_inputs(module: Any, **binary: bool) -> list[Any]:
    inputs = []
    for name, values in (("INPUT0", A), ("INPUT1", B)):
        text = np.array([str(v).encode() for v in values.ravel()], dtype=object).reshape(1, 16)
        tensor = module.InferInput(name, [1, 16], "BYTES")
        tensor.set_data_from_numpy(text, **binary)
        inputs.append(tensor)
    return inputs


def _as_ints(values: np.ndarray) -> list[int]:
    # tritonclient gives JSON BYTES back as str and binary BYTES as bytes.
    return [int(v.decode() if isinstance(v, bytes) else v) for v in values.ravel()]


@pytest.mark.parametrize("binary", [False, True])
def test_simple_string_over_http(http: httpclient.InferenceServerClient, binary: bool) -> None:
    outputs = [
        httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("OUTPUT0", "OUTPUT1")
    ]
    result = http.infer(
        "simple_string", _string_inputs(httpclient, binary_data=binary), outputs=outputs
    )
    assert _as_ints(result.as_numpy("OUTPUT0")) == (A + B).ravel().tolist()
    assert _as_ints(result.as_numpy("OUTPUT1")) == (A - B).ravel().tolist()


async def test_simple_string_over_grpc_and_its_asyncio_client(
    grpc: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    result = grpc.infer("simple_string", _string_inputs(grpcclient))
    assert _as_ints(result.as_numpy("OUTPUT0")) == (A + B).ravel().tolist()
    async with grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
        result = await client.infer("simple_string", _string_inputs(grpc_aio))
        assert _as_ints(result.as_numpy("OUTPUT1")) == (A - B).ravel().tolist()


def test_text_that_is_not_a_number_is_a_clear_400(http: httpclient.InferenceServerClient) -> None:
    bad = _string_inputs(httpclient)
    bad[0].set_data_from_numpy(np.array([[b"x"] * 16], dtype=object))
    with pytest.raises(httpclient.InferenceServerException) as info:
        http.infer("simple_string", bad)
    assert info.value.status() == "400"
    assert "not an INT32 written as text" in info.value.message()


def test_grpc_explicit_typed_contents(server: ServerProcess) -> None:
    """The request built by hand with the generated stub, as the explicit-content
    examples do: int_contents for `simple`, bytes_contents for `simple_string`."""
    channel = grpc_lib.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    try:
        request = service_pb2.ModelInferRequest(model_name="simple")
        for name, values in (("INPUT0", A), ("INPUT1", B)):
            tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
            tensor.contents.int_contents[:] = values.ravel().tolist()
        response = stub.ModelInfer(request)
        outputs = {o.name: i for i, o in enumerate(response.outputs)}
        total = np.frombuffer(response.raw_output_contents[outputs["OUTPUT0"]], dtype="<i4")
        assert total.tolist() == (A + B).ravel().tolist()

        request = service_pb2.ModelInferRequest(model_name="simple_string")
        for name, values in (("INPUT0", A), ("INPUT1", B)):
            tensor = request.inputs.add(name=name, datatype="BYTES", shape=[1, 16])
            tensor.contents.bytes_contents[:] = [str(v).encode() for v in values.ravel()]
        response = stub.ModelInfer(request)
        assert [o.datatype for o in response.outputs] == ["BYTES", "BYTES"]
    finally:
        channel.close()


def test_grpc_custom_channel_arguments(server: ServerProcess) -> None:
    channel_args = [
        ("grpc.max_send_message_length", 1024 * 1024),
        ("grpc.max_receive_message_length", 1024 * 1024),
        ("grpc.keepalive_time_ms", 2**31 - 1),
        ("grpc.keepalive_timeout_ms", 20000),
        ("grpc.keepalive_permit_without_calls", False),
        ("grpc.http2.max_pings_without_data", 2),
    ]
    client = grpcclient.InferenceServerClient(
        f"127.0.0.1:{server.grpc_port}", channel_args=channel_args
    )
    try:
        _check_sum_and_difference(
            client.infer("simple", _inputs(grpcclient), headers={"test": "1"})
        )
    finally:
        client.close()


def test_statistics_name_the_one_model_asked_for(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    http.infer("simple", _inputs(httpclient))
    stats = http.get_inference_statistics(model_name="simple")
    assert [s["name"] for s in stats["model_stats"]] == ["simple"]
    assert stats["model_stats"][0]["inference_count"] >= 1
    grpc_stats = grpc.get_inference_statistics(model_name="simple", as_json=True)
    assert [s["name"] for s in grpc_stats["model_stats"]] == ["simple"]


def test_health_and_metadata_on_both_edges(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    for client in (http, grpc):
        assert client.is_server_live()
        assert client.is_server_ready()
        assert client.is_model_ready("simple")
    metadata = http.get_model_metadata("simple")
    assert metadata["name"] == "simple"
    assert [i["name"] for i in metadata["inputs"]] == ["INPUT0", "INPUT1"]
    assert metadata["inputs"][0] == {"name": "INPUT0", "datatype": "INT32", "shape": [-1, 16]}
    grpc_metadata = grpc.get_model_metadata("simple")
    assert grpc_metadata.name == "simple"
    assert [o.name for o in grpc_metadata.outputs] == ["OUTPUT0", "OUTPUT1"]
    config = grpc.get_model_config("simple").config
    assert config.max_batch_size == 8
    assert [list(i.dims) for i in config.input] == [[16], [16]]
