"""Encoding responses, errors, metadata and the repository index; and the per-output
binary/JSON choice of the binary tensor data extension."""

from __future__ import annotations

import numpy as np
import orjson
import pytest

from podserve.core.errors import InferenceFailed
from podserve.core.tensors import (
    Datatype,
    InferRequest,
    InferResponse,
    RequestedOutput,
    Tensor,
    TensorSpec,
)
from podserve.dataplane.types import ModelMetadata, RepositoryEntry, ServerMetadata
from podserve.protocol.v2 import (
    binary_output_names,
    encode_error,
    encode_infer_response,
    encode_model_metadata,
    encode_repository_index,
    encode_server_metadata,
)


def _request(outputs: tuple[RequestedOutput, ...] = (), **parameters: object) -> InferRequest:
    return InferRequest(model_name="m", inputs=(), outputs=outputs, parameters=parameters)


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        (_request(), set()),
        (_request(binary_data_output=True), {"a", "b", "c"}),
        (_request(binary_data_output=False), set()),
        (_request((RequestedOutput("a", binary_data=True),)), {"a"}),
        # A per-output setting overrides the request-level default, both ways.
        (
            _request(
                (RequestedOutput("a", binary_data=False), RequestedOutput("b")),
                binary_data_output=True,
            ),
            {"b", "c"},
        ),
        (_request((RequestedOutput("c", binary_data=True),), binary_data_output=False), {"c"}),
    ],
    ids=["default-json", "all-binary", "all-json", "one-binary", "override-off", "override-on"],
)
def test_binary_output_names(request_: InferRequest, expected: set[str]) -> None:
    assert binary_output_names(request_, ["a", "b", "c"]) == expected


def test_json_response_layout() -> None:
    response = InferResponse(
        model_name="m",
        model_version="1",
        id="42",
        parameters={"sequence_id": 3},
        outputs=(
            Tensor(
                "y",
                Datatype.FP32,
                np.array([[1.5, 2.0], [3.0, 4.25]], dtype=np.float32),
                parameters={"note": "n", "binary_data_size": 99},
            ),
        ),
    )

    body, header_length = encode_infer_response(response, binary_outputs=set())

    assert header_length is None
    assert orjson.loads(body) == {
        "model_name": "m",
        "model_version": "1",
        "id": "42",
        "parameters": {"sequence_id": 3},
        # A stale binary_data_size must not reach a JSON output.
        "outputs": [
            {
                "name": "y",
                "datatype": "FP32",
                "shape": [2, 2],
                "parameters": {"note": "n"},
                "data": [1.5, 2.0, 3.0, 4.25],
            }
        ],
    }


def test_binary_response_layout() -> None:
    response = InferResponse(
        model_name="m",
        outputs=(
            Tensor("a", Datatype.UINT16, np.array([1, 258], dtype=np.uint16)),
            Tensor("b", Datatype.BYTES, np.array([b"hi", b""], dtype=object)),
        ),
    )

    body, header_length = encode_infer_response(response, binary_outputs=True)

    assert header_length is not None
    header = orjson.loads(body[:header_length])
    assert "model_version" not in header
    assert "id" not in header
    assert [o["parameters"] for o in header["outputs"]] == [
        {"binary_data_size": 4},
        {"binary_data_size": 10},
    ]
    assert body[header_length:] == b"\x01\x00\x02\x01" + b"\x02\x00\x00\x00hi" + b"\x00" * 4


def test_fortran_ordered_output_is_sent_row_major() -> None:
    data = np.asfortranarray(np.arange(6, dtype=np.int32).reshape(2, 3))
    response = InferResponse(model_name="m", outputs=(Tensor.from_array("y", data),))

    json_body, _ = encode_infer_response(response, binary_outputs=False)
    binary_body, header_length = encode_infer_response(response, binary_outputs=True)

    assert orjson.loads(json_body)["outputs"][0]["data"] == [0, 1, 2, 3, 4, 5]
    assert header_length is not None
    assert binary_body[header_length:] == np.arange(6, dtype="<i4").tobytes()


def test_str_elements_in_a_bytes_output_are_sent_as_utf8() -> None:
    data = np.array(["h\u00e9", b"x"], dtype=object)
    response = InferResponse(model_name="m", outputs=(Tensor("y", Datatype.BYTES, data),))

    json_body, _ = encode_infer_response(response, binary_outputs=False)
    binary_body, header_length = encode_infer_response(response, binary_outputs=True)

    assert orjson.loads(json_body)["outputs"][0]["data"] == ["h\u00e9", "x"]
    assert binary_body[header_length:] == b"\x03\x00\x00\x00h\xc3\xa9\x01\x00\x00\x00x"


@pytest.mark.parametrize("binary", [False, True])
def test_non_bytes_element_in_a_bytes_output_is_a_model_error(binary: bool) -> None:
    data = np.array([b"ok", 7], dtype=object)
    response = InferResponse(model_name="m", outputs=(Tensor("y", Datatype.BYTES, data),))

    with pytest.raises(InferenceFailed, match="must be bytes or str, the model returned int"):
        encode_infer_response(response, binary_outputs=binary)


def test_error_body() -> None:
    assert orjson.loads(encode_error('bad "x"')) == {"error": 'bad "x"'}


def test_server_metadata() -> None:
    meta = ServerMetadata(name="podserve", version="0.1.0", extensions=("binary_tensor_data",))

    assert orjson.loads(encode_server_metadata(meta)) == {
        "name": "podserve",
        "version": "0.1.0",
        "extensions": ["binary_tensor_data"],
    }


def test_model_metadata() -> None:
    meta = ModelMetadata(
        name="iris",
        versions=("1",),
        platform="sklearn",
        inputs=(TensorSpec("x", Datatype.FP32, (-1, 4)),),
        outputs=(TensorSpec("y", Datatype.INT64, (-1,)),),
    )

    assert orjson.loads(encode_model_metadata(meta)) == {
        "name": "iris",
        "versions": ["1"],
        "platform": "sklearn",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 4]}],
        "outputs": [{"name": "y", "datatype": "INT64", "shape": [-1]}],
    }
    unversioned = ModelMetadata(name="a", versions=(), platform="p", inputs=(), outputs=())
    assert "versions" not in orjson.loads(encode_model_metadata(unversioned))


def test_repository_index() -> None:
    entries = [
        RepositoryEntry(name="a", version="1", state="READY"),
        RepositoryEntry(name="b", version="", state="UNAVAILABLE", reason="load failed: oom"),
    ]

    assert orjson.loads(encode_repository_index(entries)) == [
        {"name": "a", "version": "1", "state": "READY"},
        {"name": "b", "state": "UNAVAILABLE", "reason": "load failed: oom"},
    ]
