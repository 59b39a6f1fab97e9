"""The one OIP raw-tensor codec (issue 13, bug 4): REST's binary-data extension and
gRPC's raw contents decode and encode through `protocol/v2/raw.py`, so for every datatype
the same tensor makes the same bytes on both edges, round-trips exactly on both, and
the same bad bytes are refused with the same message on both."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from podserve.core.errors import InferenceFailed, InvalidInput
from podserve.core.tensors import Datatype, InferResponse, Tensor
from podserve.protocol.v2 import decode_infer_request, encode_infer_response
from podserve.protocol.v2.raw import MAX_ELEMENT_BYTES, decode_tensor, encode_tensor
from podserve.server.grpc import codec as grpc_codec
from podserve.server.grpc._generated import inference_pb2 as pb

SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=4)


@st.composite
def tensors(draw: st.DrawFn) -> tuple[Datatype, npt.NDArray[Any]]:
    datatype = draw(st.sampled_from(list(Datatype)))
    shape = draw(SHAPES)
    if datatype is Datatype.BYTES:
        count = int(np.prod(shape))
        items = draw(st.lists(st.binary(max_size=12), min_size=count, max_size=count))
        data = np.empty(count, dtype=object)
        data[:] = items
        return datatype, data.reshape(shape)
    # every bit pattern, NaNs and infinities included: raw bytes carry them all
    dtype = datatype.numpy_dtype
    return datatype, draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(dtype)))


def same(a: npt.NDArray[Any], b: npt.NDArray[Any]) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":  # compare bits: NaN payloads and -0.0 must survive too
        return a.tobytes() == b.tobytes()
    return bool(np.array_equal(a, b))


def rest_request(datatype: Datatype, shape: tuple[int, ...], chunk: bytes) -> tuple[bytes, int]:
    header = orjson.dumps(
        {
            "inputs": [
                {
                    "name": "x",
                    "datatype": datatype.value,
                    "shape": list(shape),
                    "parameters": {"binary_data_size": len(chunk)},
                }
            ]
        }
    )
    return header + chunk, len(header)


def decode_rest(datatype: Datatype, shape: tuple[int, ...], chunk: bytes) -> npt.NDArray[Any]:
    body, header_length = rest_request(datatype, shape, chunk)
    request = decode_infer_request(
        body, model_name="m", model_version=None, header_length=header_length
    )
    return request.inputs[0].data


def decode_grpc(datatype: Datatype, shape: tuple[int, ...], chunk: bytes) -> npt.NDArray[Any]:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype=datatype.value, shape=list(shape))
    message.raw_input_contents.append(chunk)
    return grpc_codec.decode_infer_request(message, request_id=None).inputs[0].data


def encode_rest(datatype: Datatype, data: npt.NDArray[Any]) -> bytes:
    response = InferResponse("m", (Tensor("y", datatype, data),))
    body, header_length = encode_infer_response(response, binary_outputs=True)
    assert header_length is not None
    return body[header_length:]


def encode_grpc(datatype: Datatype, data: npt.NDArray[Any]) -> bytes:
    response = InferResponse("m", (Tensor("y", datatype, data),))
    message = grpc_codec.encode_infer_response(response, request_id=None)
    return bytes(message.raw_output_contents[0])


@settings(max_examples=150, deadline=None)
@given(tensors())
def test_every_datatype_round_trips_identically_on_both_edges(
    case: tuple[Datatype, npt.NDArray[Any]],
) -> None:
    datatype, data = case
    chunk = encode_tensor("x", datatype, data)
    # responses: both edges put exactly the codec's bytes on the wire
    assert encode_rest(datatype, data) == chunk
    assert encode_grpc(datatype, data) == chunk
    # requests: both edges decode those bytes back to the same array
    for decode in (decode_rest, decode_grpc):
        decoded = decode(datatype, data.shape, chunk)
        assert same(decoded, data), (decode.__name__, decoded, data)
        assert decoded.flags.writeable  # a fresh copy on both edges, never a view


REFUSED = [
    (Datatype.BOOL, (3,), b"\x00\x01\x02", "BOOL raw data holds a byte other than 0 or 1"),
    (Datatype.FP32, (2,), b"\x00" * 7, "shape [2] of FP32 needs 8 bytes of raw data, got 7"),
    (Datatype.BYTES, (2,), b"\x01\x00\x00\x00a", "shape needs 2 BYTES elements, the data holds 1"),
    (Datatype.BYTES, (1,), b"\x09\x00\x00\x00abc", "element 0 declares 9 bytes but only 3"),
]


@pytest.mark.parametrize(("datatype", "shape", "chunk", "message"), REFUSED)
def test_bad_bytes_are_refused_the_same_on_both_edges(
    datatype: Datatype, shape: tuple[int, ...], chunk: bytes, message: str
) -> None:
    for decode in (decode_rest, decode_grpc):
        with pytest.raises(InvalidInput, match=re.escape(message)):
            decode(datatype, shape, chunk)


def test_bad_outputs_are_inference_failures_on_both_edges() -> None:
    not_bytes = np.array([b"ok", 7], dtype=object)
    wrong_dtype = np.zeros(2, dtype=np.float64)
    for encode in (encode_rest, encode_grpc):
        with pytest.raises(InferenceFailed, match="'y': a BYTES element must be bytes or str"):
            encode(Datatype.BYTES, not_bytes)
        with pytest.raises(InferenceFailed, match=r"'y'.*float64.*FP32"):
            encode(Datatype.FP32, wrong_dtype)


def test_the_four_gib_element_limit_is_the_codecs() -> None:
    class Huge(bytes):
        def __len__(self) -> int:
            return MAX_ELEMENT_BYTES + 1

    data = np.empty(1, dtype=object)
    data[0] = Huge(b"x")
    with pytest.raises(InferenceFailed, match="exceeds the protocol's 4 GiB element limit"):
        encode_tensor("y", Datatype.BYTES, data)


def test_decode_tensor_reads_memoryviews_and_bytes_alike() -> None:
    data = np.arange(6, dtype=np.int16).reshape(2, 3)
    raw = data.astype("<i2").tobytes()
    for chunk in (raw, memoryview(raw)):
        assert same(decode_tensor("x", Datatype.INT16, (2, 3), chunk), data)
