"""The real grpc.aio server on 127.0.0.1:0, driven by the real tritonclient (asyncio)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeAlias

import grpc
import numpy as np
import pytest
import tritonclient.grpc.aio as triton_aio
from tritonclient.grpc import InferInput, InferRequestedOutput
from tritonclient.grpc import service_pb2 as triton_pb
from tritonclient.grpc import service_pb2_grpc as triton_stub
from tritonclient.utils import InferenceServerException

from podserve.core.errors import (
    Cancelled,
    DeadlineExceeded,
    Draining,
    InferenceFailed,
    InvalidInput,
    ModelLoadFailed,
    ModelNotFound,
    ModelNotReady,
    PayloadTooLarge,
    Unavailable,
    UnprocessableInput,
)
from podserve.server.grpc import start_grpc_server, stop_grpc_server
from podserve.server.grpc.service import INFER_ENDPOINT
from podserve.server.grpc.stream import STREAM_INFER_ENDPOINT
from tests.grpc.fake_dataplane import FakeDataPlane

Client: TypeAlias = triton_aio.InferenceServerClient


def infer_input(name: str, data: np.ndarray[Any, Any], datatype: str) -> InferInput:
    item = InferInput(name, list(data.shape), datatype)
    item.set_data_from_numpy(data)
    return item


def sample(datatype: str) -> np.ndarray[Any, Any]:
    if datatype == "BYTES":
        return np.array([[b"", b"a"], [b"\x00\xff", "é".encode()]], dtype=object)
    if datatype == "BOOL":
        return np.array([[True, False], [False, True]])
    dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype)
    if dtype is not None:
        return np.array([[0.5, -1.25], [np.inf, 65504.0 if datatype == "FP16" else 1e30]], dtype)
    info = np.iinfo(datatype.lower())
    return np.array([[info.min, info.max], [0, 1]], dtype=info.dtype)


ALL_DATATYPES = [
    "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64",
    "FP16", "FP32", "FP64", "BYTES",
]  # fmt: skip


async def raises_status(call: Any) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        await call
    return info.value


# ------------------------------------------------------------------------- health, metadata


async def test_health(client: Client, fake: FakeDataPlane) -> None:
    assert await client.is_server_live()
    assert await client.is_server_ready()
    fake.live_ok = False
    fake.ready_ok = False
    assert not await client.is_server_live()
    assert not await client.is_server_ready()


async def test_model_ready(client: Client) -> None:
    assert await client.is_model_ready("echo")
    assert not await client.is_model_ready("wait")  # known but unloaded
    # Triton's ModelIsReady: an unknown model is not ready, not an error
    assert not await client.is_model_ready("nope")


async def test_metadata(client: Client) -> None:
    server = await client.get_server_metadata()
    assert (server.name, server.version, list(server.extensions)) == (
        "podserve",
        "0.1.0",
        ["model_repository"],
    )
    model = await client.get_model_metadata("echo", as_json=True)
    assert model == {
        "name": "echo",
        "versions": ["1"],
        "platform": "fake",
        "inputs": [{"name": "INPUT0", "datatype": "FP32", "shape": ["-1", "4"]}],
        "outputs": [{"name": "OUTPUT0", "datatype": "FP32", "shape": ["-1", "4"]}],
    }
    error = await raises_status(client.get_model_metadata("nope"))
    assert error.status() == "StatusCode.NOT_FOUND"


# ------------------------------------------------------------------------- inference


@pytest.mark.parametrize("datatype", ALL_DATATYPES)
async def test_every_datatype_round_trips(client: Client, datatype: str) -> None:
    data = sample(datatype)
    result = await client.infer("echo", [infer_input("x", data, datatype)])
    got = result.as_numpy("x")
    assert result.get_output("x").datatype == datatype
    assert got.shape == data.shape
    if datatype == "BYTES":
        assert got.tolist() == data.tolist()
    else:
        assert got.dtype == data.dtype
        assert got.tobytes() == data.tobytes()


async def test_model_output_is_computed_per_datatype(client: Client) -> None:
    inputs = [
        infer_input("f", np.array([1.5, -2.0], np.float16), "FP16"),
        infer_input("i", np.array([3, -4], np.int64), "INT64"),
        infer_input("s", np.array([b"ab"], dtype=object), "BYTES"),
    ]
    result = await client.infer("double", inputs)
    assert result.as_numpy("f").tolist() == [3.0, -4.0]
    assert result.as_numpy("i").tolist() == [6, -8]
    assert result.as_numpy("s").tolist() == [b"abab"]


async def test_requested_outputs_reach_the_data_plane(client: Client, fake: FakeDataPlane) -> None:
    inputs = [
        infer_input("a", np.array([1], np.int32), "INT32"),
        infer_input("b", np.array([2], np.int32), "INT32"),
    ]
    result = await client.infer("echo", inputs, outputs=[InferRequestedOutput("b", class_count=2)])
    assert [o.name for o in result.get_response().outputs] == ["b"]
    assert result.as_numpy("b").tolist() == [2]
    (request,) = fake.requests
    assert [(o.name, dict(o.parameters)) for o in request.outputs] == [("b", {"classification": 2})]


async def test_typed_contents_over_the_wire(grpc_port: int) -> None:
    # tritonclient always sends raw bytes; other clients use typed contents.
    request = triton_pb.ModelInferRequest(model_name="double")
    item = request.inputs.add(name="x", datatype="INT16", shape=[3])
    item.contents.int_contents.extend([1, -2, 300])
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        response = await triton_stub.GRPCInferenceServiceStub(channel).ModelInfer(request)
    raw = response.raw_output_contents[0]
    assert np.frombuffer(raw, "<i2").tolist() == [2, -4, 600]


async def test_parameters_and_timeout_pass_through(client: Client, fake: FakeDataPlane) -> None:
    fake.response_parameters = {"cached": True, "tokens": 7}
    x = infer_input("x", np.zeros(1, np.float32), "FP32")
    result = await client.infer(
        "echo",
        [x],
        timeout=250_000,  # the server-side timeout parameter, in microseconds
        priority=3,
        parameters={"mode": "fast", "n": -1, "scale": 0.5, "flag": True},
    )
    (request,) = fake.requests
    assert request.parameters == {
        "timeout": 250_000,
        "priority": 3,
        "mode": "fast",
        "n": -1,
        "scale": 0.5,
        "flag": True,
    }
    response_params = result.get_response().parameters
    assert response_params["cached"].bool_param is True
    assert response_params["tokens"].int64_param == 7
    assert fake.endpoints == [INFER_ENDPOINT]


async def test_request_id_is_echoed(client: Client, fake: FakeDataPlane) -> None:
    x = infer_input("x", np.zeros(1, np.float32), "FP32")
    given = await client.infer("echo", [x], request_id="req-42")
    assert given.get_response().id == "req-42"
    from_header = await client.infer("echo", [x], headers={"x-request-id": "hdr-7"})
    assert from_header.get_response().id == "hdr-7"
    made = await client.infer("echo", [x])
    made_id = made.get_response().id
    assert made_id
    assert made_id not in ("req-42", "hdr-7")
    assert [r.id for r in fake.requests] == ["req-42", "hdr-7", made_id]


async def test_client_deadline_reaches_the_data_plane(client: Client, fake: FakeDataPlane) -> None:
    x = infer_input("x", np.zeros(1, np.float32), "FP32")
    await client.infer("echo", [x], client_timeout=30)
    await client.infer("echo", [x])
    with_deadline, without = fake.calls
    assert with_deadline.client_timeout_s is not None
    # gRPC rounds the timeout it puts on the wire up (to limit header churn), so the server
    # may see up to ~0.1 s more than the client asked for; never seconds more.
    assert 25 <= with_deadline.client_timeout_s <= 31
    assert without.client_timeout_s is None
    # the data plane, not the codec, turns it into a deadline
    assert [r.deadline_s for r in fake.requests] == [None, None]


# ------------------------------------------------------------------------- errors

ERRORS = [
    (InvalidInput("bad shape for 'x'"), "INVALID_ARGUMENT"),
    (UnprocessableInput("context too long: 9000 > 8192 tokens"), "INVALID_ARGUMENT"),
    (PayloadTooLarge("body is 2 MiB; the limit is 1 MiB"), "RESOURCE_EXHAUSTED"),
    (ModelNotFound("model 'm' is unknown"), "NOT_FOUND"),
    (Unavailable("queue full (64)", reason="queue_full"), "UNAVAILABLE"),
    (ModelNotReady("model 'm' is loading"), "UNAVAILABLE"),
    (Draining(), "UNAVAILABLE"),
    (DeadlineExceeded("deadline passed while queued"), "DEADLINE_EXCEEDED"),
    (Cancelled("client went away"), "CANCELLED"),
    (InferenceFailed("model raised ValueError: boom"), "INTERNAL"),
    (ModelLoadFailed("weights missing"), "INTERNAL"),
]


@pytest.mark.parametrize(("error", "code"), ERRORS, ids=[type(e).__name__ for e, _ in ERRORS])
async def test_domain_errors_map_to_status(
    client: Client, fake: FakeDataPlane, error: Exception, code: str
) -> None:
    fake.fail_with = error
    x = infer_input("x", np.zeros(1, np.float32), "FP32")
    raised = await raises_status(client.infer("echo", [x]))
    assert raised.status() == f"StatusCode.{code}"
    assert raised.message() == str(error)


async def test_unavailable_carries_retry_after_and_request_id(
    grpc_port: int, fake: FakeDataPlane
) -> None:
    fake.fail_with = Unavailable("queue full (64)", reason="queue_full", retry_after_s=2.2)
    request = triton_pb.ModelInferRequest(model_name="echo", id="rid-1")
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        call = triton_stub.GRPCInferenceServiceStub(channel).ModelInfer(request)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    trailing = dict(info.value.trailing_metadata() or ())
    assert trailing["retry-after"] == "3"
    assert trailing["x-request-id"] == "rid-1"


async def test_unexpected_errors_are_internal_and_logged_not_leaked(
    client: Client, fake: FakeDataPlane, caplog: pytest.LogCaptureFixture
) -> None:
    fake.fail_with = RuntimeError("secret path /etc/x")
    x = infer_input("x", np.zeros(1, np.float32), "FP32")
    with caplog.at_level(logging.ERROR, logger="podserve.server.grpc.status"):
        raised = await raises_status(client.infer("echo", [x], request_id="r9"))
    assert raised.status() == "StatusCode.INTERNAL"
    assert raised.message() == "internal server error"
    (record,) = caplog.records
    assert "ModelInfer" in record.getMessage()
    assert "r9" in record.getMessage()
    assert record.exc_info is not None


async def test_decoding_errors_are_invalid_argument(client: Client, fake: FakeDataPlane) -> None:
    # A shape the data does not fill: tritonclient checks its own inputs, so lie after.
    x = infer_input("x", np.zeros(4, np.float32), "FP32")
    x.set_shape([5])
    raised = await raises_status(client.infer("echo", [x]))
    assert raised.status() == "StatusCode.INVALID_ARGUMENT"
    assert raised.message() == "input 'x': shape [5] of FP32 needs 20 bytes of raw data, got 16"
    assert fake.requests == []  # refused before it reached the data plane


async def test_unimplemented_methods_say_so(client: Client) -> None:
    raised = await raises_status(client.get_trace_settings())
    assert raised.status() == "StatusCode.UNIMPLEMENTED"


# ------------------------------------------------------------------------- repository


async def test_repository_index_load_unload(client: Client, fake: FakeDataPlane) -> None:
    index = await client.get_model_repository_index(as_json=True)
    assert index["models"] == [
        {"name": "double", "version": "1", "state": "READY"},
        {"name": "echo", "version": "1", "state": "READY"},
        {"name": "wait", "version": "1", "state": "UNAVAILABLE"},
    ]
    await client.load_model("wait")
    assert fake.loads == ["wait"]
    assert await client.is_model_ready("wait")
    await client.unload_model("echo")  # tritonclient sends unload_dependents=False
    assert fake.unloads == ["echo"]
    assert not await client.is_model_ready("echo")


async def test_repository_ready_filter(grpc_port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = triton_stub.GRPCInferenceServiceStub(channel)
        response = await stub.RepositoryIndex(triton_pb.RepositoryIndexRequest(ready=True))
    assert [m.name for m in response.models] == ["double", "echo"]


async def test_repository_refusals(client: Client, fake: FakeDataPlane) -> None:
    unknown = await raises_status(client.load_model("nope"))
    assert unknown.status() == "StatusCode.NOT_FOUND"
    with_config = await raises_status(client.load_model("echo", config='{"max_batch_size": 8}'))
    assert with_config.status() == "StatusCode.INVALID_ARGUMENT"
    assert with_config.message() == "load parameters are not supported: config"
    fake.fail_with = None
    assert fake.loads == []


async def test_repository_name_must_be_empty(grpc_port: int) -> None:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
        stub = triton_stub.GRPCInferenceServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await stub.RepositoryIndex(triton_pb.RepositoryIndexRequest(repository_name="other"))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


# ------------------------------------------------------------------------- disconnects


async def test_client_cancel_cancels_the_data_plane_call(
    client: Client, fake: FakeDataPlane
) -> None:
    x = infer_input("x", np.zeros(1, np.float32), "FP32")
    call = asyncio.ensure_future(client.infer("wait", [x]))
    await asyncio.wait_for(fake.wait_started.wait(), timeout=10)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call
    await asyncio.wait_for(fake.disconnect_seen.wait(), timeout=10)
    assert fake.recorded == [("wait", INFER_ENDPOINT, "499")]


async def test_client_deadline_cancels_the_data_plane_call(
    client: Client, fake: FakeDataPlane
) -> None:
    x = infer_input("x", np.zeros(1, np.float32), "FP32")
    raised = await raises_status(client.infer("wait", [x], client_timeout=0.2))
    assert raised.status() == "StatusCode.DEADLINE_EXCEEDED"
    await asyncio.wait_for(fake.disconnect_seen.wait(), timeout=10)
    (call,) = fake.calls
    assert call.client_timeout_s is not None


async def test_stream_answers_in_completion_order_and_leaving_disconnects(
    client: Client, fake: FakeDataPlane
) -> None:
    x = infer_input("x", np.arange(3, dtype=np.float32), "FP32")
    keep_open = asyncio.Event()

    async def requests() -> AsyncIterator[dict[str, Any]]:
        yield {"model_name": "wait", "inputs": [x], "request_id": "slow"}
        yield {"model_name": "double", "inputs": [x], "request_id": "fast"}
        yield {"model_name": "nope", "inputs": [x], "request_id": "unknown"}
        await keep_open.wait()  # the client keeps its side open

    responses = client.stream_infer(requests())
    answers = [await asyncio.wait_for(responses.__anext__(), 10) for _ in range(2)]
    by_id = {
        (result.get_response().id if result is not None else None): (result, error)
        for result, error in answers
    }
    fast, error = by_id["fast"]
    assert error is None
    assert fast.as_numpy("x").tolist() == [0.0, 2.0, 4.0]
    _, unknown_error = by_id[None]
    assert "unknown" in str(unknown_error)
    await asyncio.wait_for(fake.wait_started.wait(), timeout=10)
    assert fake.endpoints[0] == STREAM_INFER_ENDPOINT
    responses.cancel()  # the client leaves with "slow" still running
    await asyncio.wait_for(fake.disconnect_seen.wait(), timeout=10)
    # every streamed request is counted, by the status REST would give it
    for _ in range(1000):
        if len(fake.recorded) == 3:
            break
        await asyncio.sleep(0)
    assert sorted(fake.recorded) == [
        ("double", STREAM_INFER_ENDPOINT, "200"),
        ("nope", STREAM_INFER_ENDPOINT, "404"),
        ("wait", STREAM_INFER_ENDPOINT, "499"),
    ]


async def test_model_config_and_statistics(client: Client, fake: FakeDataPlane) -> None:
    config = (await client.get_model_config("double", as_json=True))["config"]
    assert config["name"] == "double"
    assert config["max_batch_size"] == 8
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": ["3"]}]
    assert config["output"][0]["reshape"] == {}  # an empty shape: the batch dimension only
    assert config["dynamic_batching"]["preferred_batch_size"] == [4, 8]
    assert config["instance_group"][0]["kind"] == "KIND_CPU"
    assert config["parameters"] == {"scale": {"string_value": "2"}}
    raised = await raises_status(client.get_model_config("nope"))
    assert raised.status() == "StatusCode.NOT_FOUND"
    raised = await raises_status(client.get_model_config(""))
    assert raised.status() == "StatusCode.INVALID_ARGUMENT"
    one = await client.get_inference_statistics("double", as_json=True)
    (stats,) = one["model_stats"]
    assert stats["inference_stats"]["success"] == {"count": "5", "ns": "5000"}
    assert stats["batch_stats"] == [
        {
            "batch_size": "4",
            "compute_input": {},
            "compute_infer": {"count": "1", "ns": "700"},
            "compute_output": {},
        }
    ]
    everything = await client.get_inference_statistics(as_json=True)
    assert [s["name"] for s in everything["model_stats"]] == ["double", "echo"]


async def test_stop_after_grace_disconnects_in_flight_requests() -> None:
    fake = FakeDataPlane()
    server, port = await start_grpc_server(fake, "127.0.0.1", 0, max_message_bytes=1 << 20)
    async with triton_aio.InferenceServerClient(f"127.0.0.1:{port}") as client:
        x = infer_input("x", np.zeros(1, np.float32), "FP32")
        call = asyncio.ensure_future(client.infer("wait", [x]))
        await asyncio.wait_for(fake.wait_started.wait(), timeout=10)
        await stop_grpc_server(server, grace_s=0.1)
        with pytest.raises(InferenceServerException):
            await call
    await asyncio.wait_for(fake.disconnect_seen.wait(), timeout=10)


# ------------------------------------------------------------------------- the server


async def test_messages_over_the_limit_are_resource_exhausted(fake: FakeDataPlane) -> None:
    server, port = await start_grpc_server(fake, "127.0.0.1", 0, max_message_bytes=4096)
    try:
        async with triton_aio.InferenceServerClient(f"127.0.0.1:{port}") as client:
            small = infer_input("x", np.zeros(16, np.float32), "FP32")
            await client.infer("echo", [small])
            big = infer_input("x", np.zeros(4096, np.float32), "FP32")
            raised = await raises_status(client.infer("echo", [big]))
    finally:
        await stop_grpc_server(server, grace_s=0)
    assert raised.status() == "StatusCode.RESOURCE_EXHAUSTED"
    assert len(fake.requests) == 1


async def test_a_taken_port_fails_loudly(fake: FakeDataPlane, grpc_port: int) -> None:
    # With SO_REUSEPORT on, this second bind would succeed and silently share traffic.
    with pytest.raises(OSError, match=f"127.0.0.1:{grpc_port}"):
        await start_grpc_server(fake, "127.0.0.1", grpc_port, max_message_bytes=1 << 20)


async def test_max_message_bytes_must_be_positive(fake: FakeDataPlane) -> None:
    with pytest.raises(ValueError, match="max_message_bytes"):
        await start_grpc_server(fake, "127.0.0.1", 0, max_message_bytes=0)
