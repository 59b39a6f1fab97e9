"""What the gRPC edge of a real `podserve serve` process does with what a message
carries, against grpcio stubs: the request-wide BYTES bound on typed contents, a
stream's early refusal from a full queue, status details that stay under gRPC's
metadata limits, the message `id` echoed verbatim, the models a stream notes for the
drain's log line, and what a unary call to a generative model is told.

Models: `simple` and `simple_string` (examples/models), `tiny-lm` (generative), and
`held`, the fake runtime (y = 2x on FP32 [-1, 3]) with one instance and a queue of one,
whose batch holding 13 never ends (its `hang_value`): two such requests fill it."""

from __future__ import annotations

import queue
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from tests.support.server import ServerProcess, wait_until, write_model

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
MAX_BYTES_ELEMENTS = 1 << 20  # protocol/v2/raw.py
HANG = 13.0


def held_model(root: Path) -> Path:
    return write_model(
        root,
        "held",
        parameters={"hang_value": HANG},
        batching={"enabled": False},
        limits={"max_queue": 1},
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    models = tmp_path_factory.mktemp("models")
    args = [f"{name}={EXAMPLES / name}" for name in ("simple", "simple_string", "tiny-lm")] + [
        f"held={held_model(models)}"
    ]
    with ServerProcess(
        *[arg for model in args for arg in ("--model", model)],
        env={"HF_HUB_OFFLINE": "1"},
        grpc=True,
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield process


@pytest.fixture
def client(server: ServerProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


def rpc_error(call: Any, *args: Any, **kwargs: Any) -> Any:
    with pytest.raises(grpc.RpcError) as raised:
        call(*args, **kwargs)
    return raised.value


def simple_request(request_id: str) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="simple", id=request_id)
    for name in ("INPUT0", "INPUT1"):
        request.inputs.add(name=name, datatype="INT32", shape=[1, 16]).contents.int_contents.extend(
            range(16)
        )
    return request


def held_request(value: float, elements: int = 3) -> pb.ModelInferRequest:
    request = pb.ModelInferRequest(model_name="held")
    tensor = request.inputs.add(name="x", datatype="FP32", shape=[1, 3])
    tensor.contents.fp32_contents.extend([value] * elements)
    return request


# ------------------------------------------------------------------ typed BYTES contents


def test_typed_bytes_contents_count_against_the_request_bytes_bound(
    client: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    """Raw and shared-memory BYTES inputs were bounded, typed `bytes_contents` were not
    (/tmp/probe-grpc/p04_big.py): each element became a Python object."""
    rows = MAX_BYTES_ELEMENTS // 16 // 2 + 1  # each input just over half the bound
    request = pb.ModelInferRequest(model_name="simple_string")
    for name in ("INPUT0", "INPUT1"):
        tensor = request.inputs.add(name=name, datatype="BYTES", shape=[rows, 16])
        tensor.contents.bytes_contents.extend([b""] * (rows * 16))
    error = rpc_error(client.ModelInfer, request, timeout=60)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error.details() == (
        f"input 'INPUT1': shape [{rows}, 16] holds {rows * 16} BYTES elements; a request may "
        f"hold at most {MAX_BYTES_ELEMENTS} (other inputs of the request hold {rows * 16}): "
        "send fewer, longer elements or split the request"
    )


# ------------------------------------------------------------------ a full queue


def test_a_stream_is_refused_by_a_full_queue_before_its_tensors_are_decoded(
    server: ServerProcess, client: pb_grpc.GRPCInferenceServiceStub
) -> None:
    """The unary call was refused before its decode, a stream's message only after it
    (/tmp/probe-grpc/p05b.py). A message whose tensors cannot be decoded tells which
    came first: the queue's refusal, or the decode's."""
    running = client.ModelInfer.future(held_request(HANG), timeout=120)
    wait_until(
        lambda: server.metric("podserve_inflight_requests", {"model": "held"}) == 1,
        what="the instance busy",
    )
    queued = client.ModelInfer.future(held_request(HANG), timeout=120)
    wait_until(
        lambda: server.metric("podserve_queue_depth", {"model": "held"}) == 1,
        what="one request queued",
    )
    try:
        undecodable = held_request(1.0, elements=2)  # shape [1, 3] needs 3
        error = rpc_error(client.ModelInfer, undecodable, timeout=30)
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "queue is full" in error.details()
        (reply,) = client.ModelStreamInfer(iter([undecodable]), timeout=30)
        assert "queue is full" in reply.error_message
    finally:
        running.cancel()
        queued.cancel()


# ------------------------------------------------------------------ status details


# Non-inference messages are at most 64 KiB (server/grpc/handlers.py): a name under it,
# still far over the 16 KiB a client takes of metadata.
@pytest.mark.parametrize(
    ("method", "length"),
    [("ModelMetadata", 60_000), ("ModelConfig", 60_000), ("ModelInfer", 1_000_000)],
)
def test_a_huge_model_name_is_not_found_with_its_name_cut(
    client: pb_grpc.GRPCInferenceServiceStub, method: str, length: int
) -> None:
    """The details echoed the whole name: over the client's 16 KiB metadata limit it saw
    RESOURCE_EXHAUSTED "Stream removed" (/tmp/probe-grpc/p09_names.py)."""
    name = "m" * length
    message: Any = {
        "ModelMetadata": pb.ModelMetadataRequest(name=name),
        "ModelInfer": pb.ModelInferRequest(model_name=name),
        "ModelConfig": pb.ModelConfigRequest(name=name),
    }[method]
    error = rpc_error(getattr(client, method), message, timeout=30)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details().startswith("Request for unknown model: '" + "m" * 199 + "...")
    assert f"({length + 2} characters)" in error.details()  # the quotes are in the run
    assert len(error.details()) < 2048


def test_details_full_of_characters_gRPC_escapes_stay_bounded(
    client: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    """Short words of non-ASCII characters: none is cut as a long run, and each costs
    up to 12 bytes percent-encoded; the whole stays under 2 KiB on the wire."""
    name = "ü " * 20_000
    error = rpc_error(client.ModelMetadata, pb.ModelMetadataRequest(name=name), timeout=30)
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert error.details().endswith("more characters)")
    assert len(error.details().encode()) < 2048


# ------------------------------------------------------------------ the message id


@pytest.mark.parametrize("request_id", ["u" * 129, "tab\tid", "new\nline", "req-1"])
def test_the_message_id_is_echoed_verbatim(
    client: pb_grpc.GRPCInferenceServiceStub, request_id: str
) -> None:
    """It was replaced by a random id when over 128 characters or not printable, and
    only on success (/tmp/probe-grpc/p19_ids.py); REST and Triton echo it as it came."""
    assert client.ModelInfer(simple_request(request_id), timeout=30).id == request_id
    failing = pb.ModelInferRequest(model_name="simple", id=request_id)  # no inputs
    replies = list(client.ModelStreamInfer(iter([simple_request(request_id), failing]), timeout=30))
    assert sorted(bool(r.error_message) for r in replies) == [False, True]
    assert [r.infer_response.id for r in replies] == [request_id, request_id]


# ------------------------------------------------------------------ generative models


def test_a_unary_call_to_a_generative_model_is_pointed_to_the_stream(
    client: pb_grpc.GRPCInferenceServiceStub,
) -> None:
    request = pb.ModelInferRequest(model_name="tiny-lm")
    request.inputs.add(
        name="text_input", datatype="BYTES", shape=[1]
    ).contents.bytes_contents.append(b"hello")
    error = rpc_error(client.ModelInfer, request, timeout=60)
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "ModelStreamInfer" in error.details()
    assert "/v1/completions" in error.details()


# ------------------------------------------------------------------ the drain's log line


def test_a_cut_stream_names_only_the_models_it_was_served(tmp_path: Path) -> None:
    """The stream noted every distinct model name asked, unknown ones too, in a list
    scanned for each message (/tmp/probe-grpc/p17_models_list.py); the drain's log line
    named them all. Now only models the server knows are noted."""
    with ServerProcess(
        "--model", f"held={held_model(tmp_path)}", "--drain-timeout-s", "1", grpc=True
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, timeout_s=120, what="ready")
        feed: queue.Queue[pb.ModelInferRequest | None] = queue.Queue()
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            replies = pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(
                iter(feed.get, None), timeout=120
            )
            for index in range(50):
                feed.put(pb.ModelInferRequest(model_name=f"unknown-{index}"))
            for _ in range(50):
                assert "unknown model" in next(replies).error_message
            feed.put(held_request(HANG))
            wait_until(
                lambda: server.metric("podserve_inflight_requests", {"model": "held"}) == 1,
                what="the stream's request running",
            )
            server.send_signal(signal.SIGTERM)
            error = rpc_error(list, replies)
            assert error.code() == grpc.StatusCode.UNAVAILABLE
            feed.put(None)
        line = server.wait_log(lambda r: r.get("msg") == "request cut at drain timeout")
        assert line["model"] == "held"
        assert line["path"] == "/inference.GRPCInferenceService/ModelStreamInfer"
