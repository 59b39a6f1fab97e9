"""Conformance with the reference client: bodies built by `tritonclient.http` decode to the
arrays it was given, and our response bodies parse back, through `tritonclient.http`, to
the arrays the model returned. Every datatype, JSON and binary."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import pytest
import tritonclient.http as triton

from podserve.core.tensors import Datatype, InferResponse, Tensor
from podserve.protocol.v2 import (
    binary_output_names,
    decode_infer_request,
    encode_infer_response,
)

Client = triton.InferenceServerClient


def _client_request(
    arrays: dict[str, npt.NDArray[Any]], *, binary: dict[str, bool], **kwargs: Any
) -> tuple[bytes, int | None]:
    inputs = []
    for name, array in arrays.items():
        item = triton.InferInput(name, list(array.shape), Datatype.from_numpy(array.dtype).value)
        item.set_data_from_numpy(array, binary_data=binary[name])
        inputs.append(item)
    body, json_size = Client.generate_request_body(inputs, **kwargs)
    return body, json_size


def _assert_same(got: npt.NDArray[Any], want: npt.NDArray[Any]) -> None:
    """Exact equality: same shape and dtype, floats bit for bit (-0.0 is not 0.0)."""
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    if want.dtype.kind == "f":
        assert got.tobytes() == want.tobytes()
    else:
        assert got.tolist() == want.tolist()


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_client_request_decodes_to_its_arrays(
    datatype: Datatype, sample: npt.NDArray[Any], binary: bool
) -> None:
    body, json_size = _client_request({"x": sample}, binary={"x": binary})
    assert (json_size is not None) is binary

    request = decode_infer_request(body, model_name="m", model_version="3", header_length=json_size)

    (tensor,) = request.inputs
    assert (tensor.name, tensor.datatype) == ("x", datatype)
    assert tensor.parameters == {}  # binary_data_size is consumed by the codec
    _assert_same(tensor.data, sample)
    assert (request.model_name, request.model_version) == ("m", "3")


def test_mixed_binary_and_json_inputs_keep_their_order_and_data() -> None:
    arrays: dict[str, npt.NDArray[Any]] = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": np.array([1, 2, 3], dtype=np.int64),
        "c": np.array([b"first", b"\xff\xfe not utf-8"], dtype=object),
        "d": np.zeros((0, 4), dtype=np.float16),
        "e": np.array([True, False]),
    }
    binary = {"a": True, "b": False, "c": True, "d": True, "e": False}
    body, json_size = _client_request(arrays, binary=binary)

    request = decode_infer_request(
        body, model_name="m", model_version=None, header_length=json_size
    )

    assert [t.name for t in request.inputs] == list(arrays)
    for tensor in request.inputs:
        _assert_same(tensor.data, arrays[tensor.name])


def test_request_id_parameters_and_outputs_are_decoded() -> None:
    outputs = [
        triton.InferRequestedOutput("y", binary_data=False),
        triton.InferRequestedOutput("z"),
    ]
    body, json_size = _client_request(
        {"x": np.ones(3, dtype=np.float32)},
        binary={"x": True},
        outputs=outputs,
        request_id="req-7",
        priority=2,
        timeout=1500,
        parameters={"temperature": 0.5, "tag": "blue"},
    )

    request = decode_infer_request(
        body, model_name="m", model_version=None, header_length=json_size
    )

    assert request.id == "req-7"
    assert request.parameters == {"priority": 2, "timeout": 1500, "temperature": 0.5, "tag": "blue"}
    assert [(o.name, o.binary_data) for o in request.outputs] == [("y", False), ("z", True)]
    assert binary_output_names(request, ["y", "z"]) == {"z"}


def test_client_without_outputs_asks_for_every_output_in_binary() -> None:
    body, json_size = _client_request({"x": np.ones(2, dtype=np.int32)}, binary={"x": False})

    request = decode_infer_request(
        body, model_name="m", model_version=None, header_length=json_size
    )

    assert request.outputs == ()
    assert binary_output_names(request, ["p", "q"]) == {"p", "q"}


def _parse(body: bytes, header_length: int | None) -> Any:
    return Client.parse_response_body(body, header_length=header_length)


@pytest.mark.parametrize("binary", [False, True], ids=["json", "binary"])
def test_response_parses_in_client(
    datatype: Datatype, sample: npt.NDArray[Any], binary: bool
) -> None:
    response = InferResponse(
        model_name="m", model_version="2", id="r1", outputs=(Tensor("y", datatype, sample),)
    )

    body, header_length = encode_infer_response(response, binary_outputs=binary)

    assert (header_length is not None) is binary
    result = _parse(body, header_length)
    got = result.as_numpy("y")
    if datatype is Datatype.BYTES and not binary:
        # The client returns JSON BYTES as the str it parsed, binary BYTES as bytes.
        got = np.vectorize(lambda s: s.encode(), otypes=[object])(got)
    _assert_same(got, sample)
    header = result.get_response()
    assert (header["model_name"], header["model_version"], header["id"]) == ("m", "2", "r1")


def test_response_with_a_subset_in_binary_parses_in_client() -> None:
    arrays = {
        "a": np.arange(12, dtype=np.float64).reshape(3, 4),
        "b": np.array([[b"x", b"yy"]], dtype=object),
        "c": np.array([5, 6], dtype=np.uint16),
        "d": np.zeros((2, 0), dtype=np.int8),
    }
    outputs = tuple(Tensor.from_array(name, array) for name, array in arrays.items())

    body, header_length = encode_infer_response(
        InferResponse(model_name="m", outputs=outputs), binary_outputs={"b", "d"}
    )

    assert header_length is not None
    header = orjson.loads(body[:header_length])
    assert [("data" in o) for o in header["outputs"]] == [True, False, True, False]
    result = _parse(body, header_length)
    for name, array in arrays.items():
        _assert_same(result.as_numpy(name), array)


@pytest.mark.parametrize(
    "tensor",
    [
        Tensor.from_array("y", np.array([1.0, np.nan, -np.inf], dtype=np.float32)),
        Tensor("y", Datatype.BYTES, np.array([b"ok", b"\xff\x00\xfe"], dtype=object)),
    ],
    ids=["non-finite-float", "non-utf8-bytes"],
)
def test_values_json_cannot_carry_go_binary_and_stay_exact(tensor: Tensor) -> None:
    body, header_length = encode_infer_response(
        InferResponse(model_name="m", outputs=(tensor,)), binary_outputs=False
    )

    assert header_length is not None
    header = orjson.loads(body[:header_length])
    assert "data" not in header["outputs"][0]
    _assert_same(_parse(body, header_length).as_numpy("y"), tensor.data)
