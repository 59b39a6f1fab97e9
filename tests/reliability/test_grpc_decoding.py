"""A big gRPC inference message is decoded off the pod's event loop, as a big REST body is.

Typed `contents` become arrays element by element: 64 MiB of them (the default
`--max-body-bytes`, also gRPC's message limit) held the loop 0.6 s as FP32 and 2 s as
BYTES. The real gRPC server (tests/support/planes.py) decodes with the codec held at a gate
(tests/support/gate.py): while it is held, the same server answers `ServerLive`, and the
decode is seen on the decoding thread with the cyclic collector off. A small message
decodes on the loop's own thread. Through both the unary and the streaming RPC.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio

from podserve.httpedge.decoding import INLINE_BYTES
from podserve.server.grpc import service, stream
from podserve.server.grpc._generated import inference_pb2 as pb
from tests.support.gate import Gate, probed_while_held
from tests.support.planes import Edges, edges

pytestmark = pytest.mark.asyncio(loop_scope="module")

DECODING_THREAD = "podserve-grpc-decode_0"


@dataclass
class DecodeGate(Gate):
    collecting: list[bool] = field(default_factory=list)  # gc.isenabled() in each call


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pod(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Edges]:
    async with edges(tmp_path_factory.mktemp("grpc-decoding"), ("iris",)) as served:
        yield served


@pytest.fixture(params=["unary", "stream"])
def rpc(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch, rpc: str) -> Iterator[DecodeGate]:
    state = DecodeGate()
    module = service if rpc == "unary" else stream
    decode: Callable[..., Any] = module.decode_infer_request

    def gated(*args: Any, **kwargs: Any) -> Any:
        state.pass_through()
        state.collecting.append(gc.isenabled())
        return decode(*args, **kwargs)

    monkeypatch.setattr(module, "decode_infer_request", gated)
    yield state
    state.opened.set()


def iris_request(padding: int = 0) -> pb.ModelInferRequest:
    """One iris row as typed contents; `padding` characters in a string parameter (kept,
    not used) make the message as big as wanted."""
    request = pb.ModelInferRequest(model_name="iris", id="r1")
    tensor = request.inputs.add(name="features", datatype="FP32", shape=[1, 4])
    tensor.contents.fp32_contents.extend([5.1, 3.5, 1.4, 0.2])
    if padding:
        request.parameters["padding"].string_param = "p" * padding
    return request


async def infer(pod: Edges, rpc: str, request: pb.ModelInferRequest) -> pb.ModelInferResponse:
    if rpc == "unary":
        response: pb.ModelInferResponse = await pod.grpc.ModelInfer(request, timeout=30)
        return response
    call = pod.grpc.ModelStreamInfer(iter([request]), timeout=30)
    async for reply in call:
        assert not reply.error_message, reply.error_message
        answer: pb.ModelInferResponse = reply.infer_response
        return answer
    raise AssertionError("the stream ended without an answer")


async def test_a_big_message_is_decoded_off_the_loop_while_the_server_answers(
    pod: Edges, gate: DecodeGate, rpc: str
) -> None:
    request = iris_request(padding=INLINE_BYTES)
    assert request.ByteSize() > INLINE_BYTES
    live, response = await probed_while_held(
        gate,
        infer(pod, rpc, request),
        lambda: pod.grpc.ServerLive(pb.ServerLiveRequest(), timeout=5),
    )
    assert live.live
    assert response.model_name == "iris"
    assert gate.opened_in_time == [True]
    assert gate.threads == [DECODING_THREAD]
    assert gate.collecting == [False]
    assert gc.isenabled()


async def test_a_small_message_is_decoded_on_the_loop(
    pod: Edges, gate: DecodeGate, rpc: str
) -> None:
    gate.opened.set()
    response = await infer(pod, rpc, iris_request())
    assert response.model_name == "iris"
    assert gate.threads == [threading.current_thread().name]
