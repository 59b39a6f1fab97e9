"""The gRPC edge of a real `podserve serve` process, over the real data plane, against
its REST edge: what a message grpc.aio used to handle outside the servicer gets (bytes
that are not protobuf, a response bigger than the request limit), and the checks of a
request's `outputs` that both edges run (protocol/v2/output_selection.py).

Models: `simple` (examples/models) and `wide`, the fake runtime on INT32 (y = 2x): its
request, in typed contents of small values, takes a byte an element and its response,
raw INT32, four. The server's `--max-body-bytes` is 256 KiB."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from tritonclient.grpc import service_pb2 as pb

from tests.support.server import ServerProcess, wait_until, write_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
MAX_BODY_BYTES = 256 * 1024
SERVICE = "/inference.GRPCInferenceService/"
GARBAGE = b"\xff\xff\xff\xff not protobuf"
# Parsed on the event loop, and (over httpedge/decoding.py's INLINE_BYTES) on the
# decoding thread.
GARBAGE_SIZES = [pytest.param(GARBAGE, id="small"), pytest.param(b"\xff" * 200_000, id="big")]
# Rows of `wide` in one request: under the request limit in, over it out.
ROWS = 32768


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    models = tmp_path_factory.mktemp("models")
    int32 = {"datatype": "INT32", "shape": [-1, 3]}
    wide = write_model(
        models,
        "wide",
        inputs=[{"name": "x", **int32}],
        outputs=[{"name": "y", **int32}],
        batching={"max_batch_size": ROWS},
    )
    with ServerProcess(
        "--model",
        f"simple={EXAMPLES / 'simple'}",
        "--model",
        f"wide={wide}",
        "--max-body-bytes",
        str(MAX_BODY_BYTES),
        grpc=True,
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield process


@pytest.fixture
def channel(server: ServerProcess) -> Iterator[grpc.Channel]:
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as opened:
        yield opened


def unary(channel: grpc.Channel, method: str, response: Any) -> Any:
    """A unary method that sends the bytes it is given, as they are."""
    return channel.unary_unary(
        SERVICE + method, request_serializer=bytes, response_deserializer=response.FromString
    )


def simple_request(request_id: str, value: int) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="INT32", shape=[1, 16])
        tensor.contents.int_contents.extend([value] * 16)
    return request


def error_lines(server: ServerProcess) -> list[dict[str, Any]]:
    return [record for record in server.logs if record.get("level") == "error"]


# ------------------------------------------------------------------ not protobuf


@pytest.mark.parametrize("garbage", GARBAGE_SIZES)
def test_a_message_that_is_not_protobuf_is_invalid_argument(
    server: ServerProcess, channel: grpc.Channel, garbage: bytes
) -> None:
    infer = unary(channel, "ModelInfer", pb.ModelInferResponse)
    with pytest.raises(grpc.RpcError) as raised:
        infer(garbage, timeout=30, metadata=(("x-request-id", "garbage-1"),))
    error: Any = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        "the request message is not a valid inference.ModelInferRequest: "
        f"protobuf cannot parse its {len(garbage)} bytes"
    )
    assert ("x-request-id", "garbage-1") in error.trailing_metadata()
    # the edge still serves the next call, and logged no error for a client's mistake
    answer = infer(simple_request("after", 1).SerializeToString(), timeout=30)
    assert answer.id == "after"
    assert error_lines(server) == []


def test_every_method_refuses_a_message_that_is_not_protobuf(channel: grpc.Channel) -> None:
    metadata = unary(channel, "ModelMetadata", pb.ModelMetadataResponse)
    with pytest.raises(grpc.RpcError) as raised:
        metadata(GARBAGE, timeout=30)
    error: Any = raised.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "not a valid inference.ModelMetadataRequest" in error.details()


@pytest.mark.parametrize("garbage", GARBAGE_SIZES)
def test_a_stream_answers_a_message_that_is_not_protobuf_in_band_and_goes_on(
    server: ServerProcess, channel: grpc.Channel, garbage: bytes
) -> None:
    stream = channel.stream_stream(
        SERVICE + "ModelStreamInfer",
        request_serializer=bytes,
        response_deserializer=pb.ModelStreamInferResponse.FromString,
    )
    messages = [
        simple_request("good-1", 1).SerializeToString(),
        garbage,
        simple_request("good-2", 2).SerializeToString(),
    ]
    # every message is answered, and the stream ends OK when the client closes its side
    replies = list(stream(iter(messages), timeout=30))
    assert len(replies) == 3
    by_id = {reply.infer_response.id: reply for reply in replies}
    assert by_id.keys() == {"good-1", "", "good-2"}
    refused = by_id[""]
    assert refused.error_message == (
        "the request message is not a valid inference.ModelInferRequest: "
        f"protobuf cannot parse its {len(garbage)} bytes"
    )
    assert refused.infer_response.parameters["triton_final_response"].bool_param
    for request_id, value in (("good-1", 1), ("good-2", 2)):
        reply = by_id[request_id]
        assert reply.error_message == ""
        sums = np.frombuffer(reply.infer_response.raw_output_contents[0], np.int32)
        assert sums.tolist() == [2 * value] * 16
    assert error_lines(server) == []


# ------------------------------------------------------------------ response size


def test_a_response_bigger_than_the_request_limit_is_sent_as_on_rest(
    server: ServerProcess, channel: grpc.Channel
) -> None:
    # --max-body-bytes limits requests; neither edge limits what it answers.
    rows = ROWS
    request = pb.ModelInferRequest(model_name="wide")
    tensor = request.inputs.add(name="x", datatype="INT32", shape=[rows, 3])
    tensor.contents.int_contents.extend([1] * (rows * 3))
    assert request.ByteSize() < MAX_BODY_BYTES
    infer = unary(channel, "ModelInfer", pb.ModelInferResponse)
    answer = infer(request.SerializeToString(), timeout=60)
    assert answer.ByteSize() > MAX_BODY_BYTES
    assert np.frombuffer(answer.raw_output_contents[0], np.int32).tolist() == [2] * (rows * 3)

    # REST's JSON spells a 2 in two bytes, as the request does a 1: ask for binary data.
    body = {
        "inputs": [{"name": "x", "datatype": "INT32", "shape": [rows, 3], "data": [1] * rows * 3}],
        "parameters": {"binary_data_output": True},
    }
    with server.client() as rest:
        response = rest.post("/v2/models/wide/infer", json=body)
    assert response.status_code == 200
    assert int(response.request.headers["content-length"]) < MAX_BODY_BYTES
    assert len(response.content) > MAX_BODY_BYTES


# ------------------------------------------------------------------ output selection

INPUTS = [
    {"name": name, "datatype": "INT32", "shape": [1, 16], "data": list(range(16))}
    for name in ("INPUT0", "INPUT1")
]

# (requested outputs as REST's JSON, the message both edges refuse them with)
OUTPUT_REFUSALS = [
    pytest.param(
        [{"name": "OUTPUT0"}, {"name": "OUTPUT0"}],
        "output 'OUTPUT0' is requested more than once",
        id="asked-twice",
    ),
    pytest.param(
        [{"name": "OUTPUT0", "parameters": {"binary_data": "yes"}}],
        "output 'OUTPUT0': parameters.binary_data must be a boolean, got string",
        id="binary-data-not-a-boolean",
    ),
    pytest.param(
        [{"name": "OUTPUT1"}, {"name": ""}],
        "outputs[1]: 'name' must be a non-empty string",
        id="empty-name",
    ),
]


def grpc_outputs(outputs: list[dict[str, Any]]) -> pb.ModelInferRequest:
    """The request of `INPUTS` and `outputs`, as the gRPC message."""
    request = pb.ModelInferRequest(model_name="simple")
    for item in INPUTS:
        tensor = request.inputs.add(name=item["name"], datatype="INT32", shape=item["shape"])
        tensor.contents.int_contents.extend(item["data"])
    for output in outputs:
        wanted = request.outputs.add(name=output["name"])
        for key, value in output.get("parameters", {}).items():
            wanted.parameters[key].string_param = value
    return request


@pytest.mark.parametrize(("outputs", "message"), OUTPUT_REFUSALS)
def test_both_edges_refuse_an_output_selection_alike(
    server: ServerProcess, channel: grpc.Channel, outputs: list[dict[str, Any]], message: str
) -> None:
    with server.client() as rest:
        response = rest.post("/v2/models/simple/infer", json={"inputs": INPUTS, "outputs": outputs})
    assert (response.status_code, response.json()) == (400, {"error": message})

    infer = unary(channel, "ModelInfer", pb.ModelInferResponse)
    with pytest.raises(grpc.RpcError) as raised:
        infer(grpc_outputs(outputs).SerializeToString(), timeout=30)
    error: Any = raised.value
    assert (error.code(), error.details()) == (grpc.StatusCode.INVALID_ARGUMENT, message)


def test_both_edges_answer_a_valid_output_selection(
    server: ServerProcess, channel: grpc.Channel
) -> None:
    outputs = [{"name": "OUTPUT1", "parameters": {"binary_data": False}}]
    with server.client() as rest:
        response = rest.post("/v2/models/simple/infer", json={"inputs": INPUTS, "outputs": outputs})
    assert response.status_code == 200
    assert [o["name"] for o in response.json()["outputs"]] == ["OUTPUT1"]

    request = grpc_outputs([{"name": "OUTPUT1"}])
    request.outputs[0].parameters["binary_data"].bool_param = False
    answer = unary(channel, "ModelInfer", pb.ModelInferResponse)(
        request.SerializeToString(), timeout=30
    )
    assert [o.name for o in answer.outputs] == ["OUTPUT1"]
    assert np.frombuffer(answer.raw_output_contents[0], np.int32).tolist() == [0] * 16
