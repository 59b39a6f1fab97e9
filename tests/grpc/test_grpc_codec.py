"""codec.py without a network: round-trips through tritonclient's own encoder and
decoder, typed contents, parameters, and every refusal naming what is wrong."""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from tritonclient.grpc import InferInput, InferResult
from tritonclient.grpc import service_pb2 as triton_pb
from tritonclient.grpc._utils import _get_inference_request  # what the client really sends

from podserve.core.errors import InferenceFailed, InvalidInput
from podserve.core.tensors import Datatype, InferResponse, Tensor
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.codec import (
    decode_infer_request,
    decode_parameters,
    encode_infer_response,
    encode_parameters,
)

NUMERIC = [d for d in Datatype if d is not Datatype.BYTES]
SHAPES = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)


@st.composite
def tensors(draw: st.DrawFn, datatype: Datatype | None = None, name: str = "t") -> Tensor:
    datatype = datatype or draw(st.sampled_from(list(Datatype)))
    shape = draw(SHAPES)
    if datatype is Datatype.BYTES:
        items = draw(
            st.lists(st.binary(max_size=8), min_size=math.prod(shape), max_size=math.prod(shape))
        )
        data: npt.NDArray[Any] = np.empty(len(items), dtype=object)
        data[:] = items
        data = data.reshape(shape)
    else:
        data = draw(hnp.arrays(datatype.numpy_dtype, shape))
    return Tensor(name=name, datatype=datatype, data=data)


@st.composite
def tensor_lists(draw: st.DrawFn) -> list[Tensor]:
    count = draw(st.integers(min_value=1, max_value=4))
    return [draw(tensors(name=f"t{i}")) for i in range(count)]


def assert_same(actual: npt.NDArray[Any], expected: Tensor) -> None:
    assert actual.shape == expected.data.shape
    if expected.datatype is Datatype.BYTES:
        assert actual.reshape(-1).tolist() == expected.data.reshape(-1).tolist()
    else:
        assert actual.dtype == expected.datatype.numpy_dtype
        # Compare bit patterns, so NaN payloads and -0.0 must survive too.
        assert actual.tobytes() == np.ascontiguousarray(expected.data).tobytes()


def ours(message: Any) -> Any:
    """A tritonclient message re-read as podserve's, as the server receives it."""
    return pb.ModelInferRequest.FromString(message.SerializeToString())


# ------------------------------------------------------------------------- round trips


@settings(deadline=None)
@given(tensor_lists())
def test_response_round_trips_through_tritonclients_reader(outputs: list[Tensor]) -> None:
    response = InferResponse(model_name="m", outputs=tuple(outputs), model_version="1")
    wire = encode_infer_response(response, request_id="r").SerializeToString()
    result = InferResult(triton_pb.ModelInferResponse.FromString(wire))
    assert result.get_response().id == "r"
    for tensor in outputs:
        assert_same(result.as_numpy(tensor.name), tensor)


@settings(deadline=None)
@given(tensor_lists())
def test_request_from_tritonclients_encoder_round_trips(inputs: list[Tensor]) -> None:
    triton_inputs = []
    for tensor in inputs:
        item = InferInput(tensor.name, list(tensor.shape), tensor.datatype.value)
        item.set_data_from_numpy(tensor.data)
        triton_inputs.append(item)
    message = _get_inference_request(
        model_name="m",
        inputs=triton_inputs,
        model_version="",
        request_id="",
        outputs=None,
        sequence_id=0,
        sequence_start=False,
        sequence_end=False,
        priority=0,
        timeout=None,
        parameters=None,
    )
    decoded = decode_infer_request(ours(message), request_id=None)
    assert [t.name for t in decoded.inputs] == [t.name for t in inputs]
    for got, want in zip(decoded.inputs, inputs, strict=True):
        assert got.datatype is want.datatype
        assert_same(got.data, want)


TYPED_FIELD = {
    Datatype.BOOL: "bool_contents",
    Datatype.INT8: "int_contents",
    Datatype.INT16: "int_contents",
    Datatype.INT32: "int_contents",
    Datatype.INT64: "int64_contents",
    Datatype.UINT8: "uint_contents",
    Datatype.UINT16: "uint_contents",
    Datatype.UINT32: "uint_contents",
    Datatype.UINT64: "uint64_contents",
    Datatype.FP32: "fp32_contents",
    Datatype.FP64: "fp64_contents",
    Datatype.BYTES: "bytes_contents",
}


@settings(deadline=None)
@given(st.sampled_from(sorted(TYPED_FIELD)).flatmap(lambda d: tensors(datatype=d)))
def test_typed_contents_decode_to_the_same_tensor(tensor: Tensor) -> None:
    message = pb.ModelInferRequest(model_name="m")
    item = message.inputs.add(name="t", datatype=tensor.datatype.value, shape=tensor.shape)
    getattr(item.contents, TYPED_FIELD[tensor.datatype]).extend(tensor.data.reshape(-1).tolist())
    decoded = decode_infer_request(message, request_id=None)
    assert_same(decoded.inputs[0].data, tensor)


def test_request_fields_and_parameters_are_decoded() -> None:
    message = pb.ModelInferRequest(model_name="m", model_version="3", id="ignored-here")
    message.parameters["timeout"].int64_param = 1500
    message.parameters["priority"].uint64_param = 2**63
    message.parameters["temperature"].double_param = 0.5
    message.parameters["tag"].string_param = "x"
    message.parameters["stream"].bool_param = False
    item = message.inputs.add(name="a", datatype="INT32", shape=[2])
    item.contents.int_contents.extend([1, -2])
    item.parameters["note"].string_param = "n"
    wanted = message.outputs.add(name="out")
    wanted.parameters["classification"].int64_param = 3

    decoded = decode_infer_request(message, request_id="rid")

    assert decoded.model_name == "m"
    assert decoded.model_version == "3"
    assert decoded.id == "rid"
    assert decoded.deadline_s is None  # the data plane computes deadlines
    assert decoded.parameters == {
        "timeout": 1500,
        "priority": 2**63,
        "temperature": 0.5,
        "tag": "x",
        "stream": False,
    }
    assert decoded.inputs[0].parameters == {"note": "n"}
    assert [(o.name, dict(o.parameters)) for o in decoded.outputs] == [
        ("out", {"classification": 3})
    ]


def test_empty_version_means_none() -> None:
    message = pb.ModelInferRequest(model_name="m")
    assert decode_infer_request(message, request_id=None).model_version is None


@pytest.mark.parametrize(
    "value", [True, False, 0, -(2**63), 2**63 - 1, 2**63, 2**64 - 1, 1.25, "", "text", np.int8(-3)]
)
def test_parameters_round_trip(value: object) -> None:
    message = pb.ModelInferResponse()
    encode_parameters({"k": value}, message.parameters)
    decoded = decode_parameters(message.parameters, "response")["k"]
    assert decoded == value
    assert type(decoded) is type(value) or isinstance(value, np.integer)


@pytest.mark.parametrize("value", [None, [1], {"a": 1}, 2**64, -(2**63) - 1])
def test_parameters_without_a_wire_form_are_a_type_error(value: object) -> None:
    with pytest.raises(TypeError, match="parameter 'k'"):
        encode_parameters({"k": value}, pb.ModelInferResponse().parameters)


def test_response_echoes_request_id_unless_it_has_its_own() -> None:
    response = InferResponse(model_name="m", outputs=())
    assert encode_infer_response(response, request_id="req").id == "req"
    own = InferResponse(model_name="m", outputs=(), id="own")
    assert encode_infer_response(own, request_id="req").id == "own"


def test_response_bytes_accept_str_and_numpy_string_arrays() -> None:
    outputs = (
        Tensor("s", Datatype.BYTES, np.array(["hé", ""], dtype=object)),
        Tensor("u", Datatype.BYTES, np.array(["ab", "c"])),
        Tensor("b", Datatype.BYTES, np.array([b"x", b"yz"])),
    )
    wire = encode_infer_response(InferResponse("m", outputs), request_id=None)
    result = InferResult(triton_pb.ModelInferResponse.FromString(wire.SerializeToString()))
    assert result.as_numpy("s").tolist() == ["hé".encode(), b""]
    assert result.as_numpy("u").tolist() == [b"ab", b"c"]
    assert result.as_numpy("b").tolist() == [b"x", b"yz"]


def test_response_refuses_data_that_does_not_match_its_datatype() -> None:
    wrong = Tensor("o", Datatype.FP32, np.zeros(2, dtype=np.float64))
    with pytest.raises(InferenceFailed, match=r"'o'.*float64.*FP32"):
        encode_infer_response(InferResponse("m", (wrong,)), request_id=None)


# ------------------------------------------------------------------------- refusals


def raw_request(datatype: str, shape: list[int], raw: bytes, name: str = "x") -> Any:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name=name, datatype=datatype, shape=shape)
    message.raw_input_contents.append(raw)
    return message


def typed_request(datatype: str, shape: list[int], field: str, values: list[Any]) -> Any:
    message = pb.ModelInferRequest(model_name="m")
    item = message.inputs.add(name="x", datatype=datatype, shape=shape)
    getattr(item.contents, field).extend(values)
    return message


def two_inputs_one_raw() -> Any:
    message = raw_request("INT8", [1], b"\x01")
    message.inputs.add(name="y", datatype="INT8", shape=[1])
    return message


def raw_and_contents() -> Any:
    message = raw_request("INT32", [1], b"\x00" * 4)
    message.inputs[0].contents.int_contents.append(1)
    return message


def duplicate_inputs() -> Any:
    message = typed_request("INT32", [1], "int_contents", [1])
    message.inputs.add(name="x", datatype="INT32", shape=[1]).contents.int_contents.append(2)
    return message


def shared_memory_input() -> Any:
    message = raw_request("INT8", [1], b"\x01")
    message.inputs[0].parameters["shared_memory_region"].string_param = "r"
    return message


def empty_parameter() -> Any:
    message = pb.ModelInferRequest(model_name="m")
    message.parameters["p"].CopyFrom(pb.InferParameter())
    return message


def empty_input_parameter() -> Any:
    message = raw_request("INT8", [1], b"\x01")
    message.inputs[0].parameters["p"].CopyFrom(pb.InferParameter())
    return message


def empty_output_parameter() -> Any:
    message = raw_request("INT8", [1], b"\x01")
    message.outputs.add(name="o").parameters["p"].CopyFrom(pb.InferParameter())
    return message


def requested_outputs(*names: str, binary_data: str | None = None) -> Any:
    message = raw_request("INT8", [1], b"\x01")
    for name in names:
        wanted = message.outputs.add(name=name)
        if binary_data is not None:
            wanted.parameters["binary_data"].string_param = binary_data
    return message


def length(n: int) -> bytes:
    return n.to_bytes(4, "little")


REFUSALS = [
    (pb.ModelInferRequest(), "model_name is required"),
    (
        raw_request("FP32", [2, 2], b"\x00" * 15),
        "input 'x': shape [2, 2] of FP32 needs 16 bytes of raw data, got 15",
    ),
    (
        raw_request("FP16", [3], b"\x00" * 4),
        "input 'x': shape [3] of FP16 needs 6 bytes of raw data, got 4",
    ),
    (raw_request("FP32", [-1], b""), "input 'x': shape [-1] has a negative dimension"),
    (raw_request("FLOAT", [1], b"\x00" * 4), "input 'x': unknown datatype 'FLOAT'"),
    (raw_request("INT8", [1], b"\x01", name=""), "input 0 has no name"),
    (
        raw_request("BYTES", [2], length(1) + b"a"),
        "input 'x': shape needs 2 BYTES elements, the data holds 1",
    ),
    (
        raw_request("BYTES", [2], length(1) + b"a" + length(0) + b"junk"),
        "input 'x': BYTES data holds more than the 2 elements its shape needs (4 bytes left over)",
    ),
    (
        raw_request("BYTES", [1], length(9) + b"abc"),
        "input 'x': BYTES element 0 declares 9 bytes but only 3 remain",
    ),
    (
        raw_request("BYTES", [2], length(0) + length(5) + b"ab"),
        "input 'x': BYTES element 1 declares 5 bytes but only 2 remain",
    ),
    (
        raw_request("BYTES", [2**40], b""),
        "input 'x': shape needs 1099511627776 BYTES elements, the data holds 0",
    ),
    (two_inputs_one_raw(), "raw_input_contents has 1 entries for 2 inputs"),
    (raw_and_contents(), "input 'x' sets contents but the request uses raw_input_contents"),
    (duplicate_inputs(), "input 'x' appears more than once"),
    (shared_memory_input(), "input 'x': shared_memory_region needs shared_memory_byte_size"),
    (empty_parameter(), "request parameter 'p' has no value"),
    (empty_input_parameter(), "input 'x' parameter 'p' has no value"),
    (empty_output_parameter(), "requested output 'o' parameter 'p' has no value"),
    # the checks of protocol/v2/output_selection.py, REST's too
    (requested_outputs("o", "o"), "output 'o' is requested more than once"),
    (requested_outputs("o", ""), "outputs[1]: 'name' must be a non-empty string"),
    (
        requested_outputs("o", binary_data="yes"),
        "output 'o': parameters.binary_data must be a boolean, got string",
    ),
    (
        typed_request("FP32", [3], "fp32_contents", [1.0, 2.0]),
        "input 'x': contents.fp32_contents has 2 elements; shape [3] needs 3",
    ),
    (
        typed_request("FP32", [2], "fp64_contents", [1.0, 2.0]),
        "its elements belong in contents.fp32_contents, not contents.fp64_contents",
    ),
    (
        typed_request("FP16", [1], "fp32_contents", [1.0]),
        "input 'x': FP16 has no typed contents field; send it in raw_input_contents",
    ),
    (
        typed_request("INT8", [2], "int_contents", [1, 200]),
        "input 'x': value 200 is outside the range of INT8",
    ),
    (
        typed_request("UINT16", [1], "uint_contents", [70000]),
        "input 'x': value 70000 is outside the range of UINT16",
    ),
    (
        typed_request("INT32", [2], "int_contents", []),
        "input 'x' carries no data: set contents.int_contents or raw_input_contents",
    ),
]


@pytest.mark.parametrize(("message", "expected"), REFUSALS)
def test_bad_requests_are_refused_naming_the_problem(message: Any, expected: str) -> None:
    with pytest.raises(InvalidInput, match=re.escape(expected)):
        decode_infer_request(message, request_id=None)


def test_bool_raw_bytes_other_than_zero_or_one_are_refused_as_on_rest() -> None:
    # The one raw codec (protocol/v2/raw.py): a BOOL byte of 7 is the same 400 on both
    # edges; gRPC used to read it as True.
    with pytest.raises(InvalidInput, match="BOOL raw data holds a byte other than 0 or 1"):
        decode_infer_request(raw_request("BOOL", [3], b"\x00\x01\x07"), request_id=None)


def test_zero_element_inputs_need_no_data() -> None:
    message = pb.ModelInferRequest(model_name="m")
    message.inputs.add(name="x", datatype="FP32", shape=[0, 3])
    decoded = decode_infer_request(message, request_id=None)
    assert decoded.inputs[0].data.shape == (0, 3)


def test_an_empty_contents_message_beside_raw_contents_carries_no_data() -> None:
    # The codec only looks into `contents` when the field is set; set but empty, it holds
    # no elements, so the raw bytes are the input's data (as before issue 16's fast path).
    message = raw_request("INT8", [2], b"\x01\x02")
    message.inputs[0].contents.SetInParent()
    assert message.inputs[0].HasField("contents")
    decoded = decode_infer_request(message, request_id=None)
    assert decoded.inputs[0].data.tolist() == [1, 2]
