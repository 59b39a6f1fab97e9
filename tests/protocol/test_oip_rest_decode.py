"""Decoding hand-written v2 request bodies: what is accepted and how, and every way a
body can be wrong, each an InvalidInput whose message names the problem."""

from __future__ import annotations

import struct
from typing import Any

import numpy as np
import orjson
import pytest

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, InferRequest
from podserve.protocol.v2 import decode_infer_request, parse_header_length


def _decode(doc: Any, tail: bytes | None = None, header_length: int | None = None) -> InferRequest:
    header = orjson.dumps(doc)
    if tail is None:
        return decode_infer_request(header, model_name="m", model_version=None, header_length=None)
    length = len(header) if header_length is None else header_length
    return decode_infer_request(
        header + tail, model_name="m", model_version=None, header_length=length
    )


def _input(data: Any, shape: Any, datatype: Any = "FP32", **extra: Any) -> dict[str, Any]:
    return {"inputs": [{"name": "x", "shape": shape, "datatype": datatype, "data": data, **extra}]}


def _binary_input(size: Any, shape: list[int], datatype: str = "FP32") -> dict[str, Any]:
    item = {"name": "x", "shape": shape, "datatype": datatype}
    return {"inputs": [{**item, "parameters": {"binary_data_size": size}}]}


# --- accepted ---------------------------------------------------------------------------


def test_nested_and_flat_data_give_the_same_row_major_array() -> None:
    nested = _decode(_input([[1, 2, 3], [4, 5, 6]], [2, 3])).inputs[0].data
    flat = _decode(_input([1, 2, 3, 4, 5, 6], [2, 3])).inputs[0].data

    assert nested.dtype == np.float32
    assert nested.tolist() == flat.tolist() == [[1, 2, 3], [4, 5, 6]]


def test_uint64_above_int64_is_exact() -> None:
    data = [2**64 - 1, 1, 2**63]

    tensor = _decode(_input(data, [3], "UINT64")).inputs[0]

    assert tensor.data.dtype == np.uint64
    assert tensor.data.tolist() == data


def test_scalar_and_zero_size_shapes() -> None:
    scalar = _decode(_input([7], [], "INT32")).inputs[0].data
    empty = _decode(_input([], [0, 3], "BOOL")).inputs[0].data

    assert (scalar.shape, scalar.item()) == ((), 7)
    assert (empty.shape, empty.dtype) == ((0, 3), np.dtype(np.bool_))


def test_json_bytes_become_utf8_bytes() -> None:
    tensor = _decode(_input(["h\u00e9", ""], [2], "BYTES")).inputs[0]

    assert tensor.datatype is Datatype.BYTES
    assert tensor.data.tolist() == ["h\u00e9".encode(), b""]


def test_unknown_fields_are_ignored_and_url_names_the_model() -> None:
    doc = {**_input([1.0], [1]), "model_name": "other", "future_field": {"a": 1}}

    request = _decode(doc)

    assert request.model_name == "m"


def test_parameters_are_kept_and_binary_size_consumed() -> None:
    doc = {
        "id": "abc",
        "parameters": {"timeout": 250, "binary_data_output": True},
        "inputs": [
            {
                "name": "x",
                "shape": [1],
                "datatype": "INT8",
                "parameters": {"binary_data_size": 1, "note": "n"},
            }
        ],
        "outputs": [{"name": "y", "parameters": {"binary_data": False, "top_k": 3}}],
    }

    request = _decode(doc, tail=b"\x05")

    assert request.id == "abc"
    assert request.parameters == {"timeout": 250, "binary_data_output": True}
    assert request.inputs[0].parameters == {"note": "n"}
    assert request.inputs[0].data.tolist() == [5]
    (output,) = request.outputs
    assert (output.name, output.binary_data, dict(output.parameters)) == ("y", False, {"top_k": 3})


def test_decoded_binary_arrays_are_writable_copies() -> None:
    tensor = _decode(_binary_input(8, [2]), tail=struct.pack("<2f", 1.5, 2.5)).inputs[0]

    tensor.data[0] = 9.0  # a read-only view of the body would raise here

    assert tensor.data.tolist() == [9.0, 2.5]


def test_parse_header_length() -> None:
    assert parse_header_length(None) is None
    assert parse_header_length(" 42 ") == 42
    for bad in ("abc", "-1", "", "1.5"):
        with pytest.raises(InvalidInput, match="Inference-Header-Content-Length"):
            parse_header_length(bad)


# --- rejected ---------------------------------------------------------------------------

ERRORS: list[tuple[str, Any, bytes | None, str]] = [
    ("missing inputs", {"outputs": []}, None, r"no 'inputs'"),
    ("inputs not array", {"inputs": {"x": 1}}, None, r"'inputs' must be an array, got object"),
    ("input not object", {"inputs": [3]}, None, r"inputs\[0\] must be an object"),
    ("input without name", {"inputs": [{"shape": [1]}]}, None, r"inputs\[0\]: 'name'"),
    (
        "wrong element count",
        _input([1, 2, 3, 4, 5], [2, 3]),
        None,
        r"^input 'x': shape \[2, 3\] needs 6 elements, got 5$",
    ),
    (
        "wrong element count nested",
        _input([[1, 2], [3, 4]], [2, 3]),
        None,
        r"shape \[2, 3\] needs 6 elements, got 4",
    ),
    ("unknown datatype", _input([1], [1], "FP8"), None, r"input 'x': unknown datatype 'FP8'"),
    ("datatype not string", _input([1], [1], ["FP32"]), None, r"unknown datatype \['FP32'\]"),
    (
        "missing datatype",
        {"inputs": [{"name": "x", "shape": [1], "data": [1]}]},
        None,
        r"'datatype' is missing",
    ),
    ("negative dim", _input([], [2, -1]), None, r"input 'x': 'shape' .* got \[2,-1\]"),
    ("float dim", _input([1, 2], [2.0]), None, r"'shape' must be an array of non-negative"),
    ("bool dim", _input([1], [True]), None, r"'shape' must be an array of non-negative"),
    ("shape not array", _input([1], 1), None, r"'shape' must be an array .* got number"),
    ("too many dims", _input([1], [1] * 65), None, r"65 dimensions, at most 64"),
    ("data not array", _input(5, [1]), None, r"input 'x': data must be a JSON array, got number"),
    ("ragged data", _input([[1, 2], [3]], [3]), None, r"ragged nested array"),
    ("strings as FP32", _input(["1.5"], [1]), None, r"FP32 data must be numbers, got strings"),
    ("null in FP32", _input([1.0, None], [2]), None, r"FP32 data must be numbers, got a null"),
    ("bools as FP32", _input([True], [1]), None, r"FP32 data must be numbers, got booleans"),
    ("FP16 overflow", _input([1e6], [1], "FP16"), None, r"outside the range of FP16"),
    ("FP32 overflow", _input([1e39], [1], "FP32"), None, r"outside the range of FP32"),
    (
        "floats as INT32",
        _input([1.5, 2], [2], "INT32"),
        None,
        r"INT32 data must be integers, got 1.5",
    ),
    ("bools as INT8", _input([True], [1], "INT8"), None, r"INT8 data must be integers, got True"),
    (
        "UINT8 overflow",
        _input([300], [1], "UINT8"),
        None,
        r"value 300 is outside .* UINT8 \[0, 255\]",
    ),
    ("INT8 underflow", _input([-129], [1], "INT8"), None, r"value -129 is outside .* INT8"),
    ("negative UINT64", _input([-1, 2**63], [2], "UINT64"), None, r"value -1 is outside"),
    (
        "ints as BOOL",
        _input([1, 0], [2], "BOOL"),
        None,
        r"BOOL data must be true/false, got numbers",
    ),
    (
        "number as BYTES",
        _input(["a", 1], [2], "BYTES"),
        None,
        r"BYTES data .* strings, got a number",
    ),
    ("BYTES count", _input(["a"], [2], "BYTES"), None, r"shape \[2\] needs 2 elements, got 1"),
    ("id not string", {**_input([1], [1]), "id": 5}, None, r"'id' must be a string"),
    (
        "parameters not object",
        {**_input([1], [1]), "parameters": [1]},
        None,
        r"'parameters' must be an object",
    ),
    (
        "binary_data_output not bool",
        {**_input([1], [1]), "parameters": {"binary_data_output": "yes"}},
        None,
        r"binary_data_output must be a boolean",
    ),
    (
        "output binary_data not bool",
        {**_input([1], [1]), "outputs": [{"name": "y", "parameters": {"binary_data": 1}}]},
        None,
        r"output 'y': parameters.binary_data must be a boolean",
    ),
    (
        "duplicate input",
        {"inputs": _input([1], [1])["inputs"] * 2},
        None,
        r"input 'x' is given more than once",
    ),
    (
        "duplicate output",
        {**_input([1], [1]), "outputs": [{"name": "y"}, {"name": "y"}]},
        None,
        r"output 'y' is requested more than once",
    ),
    (
        "no data",
        {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32"}]},
        None,
        r"input 'x': has neither 'data', parameters.binary_data_size nor "
        r"parameters.shared_memory_region$",
    ),
    (
        "shared memory",
        {
            "inputs": [
                {
                    "name": "x",
                    "shape": [1],
                    "datatype": "FP32",
                    "parameters": {"shared_memory_region": "r"},
                }
            ]
        },
        None,
        r"input 'x': shared_memory_region needs shared_memory_byte_size",
    ),
    # binary extension
    (
        "binary without header length",
        _binary_input(4, [1]),
        None,
        r"no Inference-Header-Content-Length",
    ),
    (
        "binary size mismatch",
        _binary_input(8, [3]),
        bytes(8),
        r"input 'x': shape \[3\] of FP32 needs 12 bytes of raw data, got 8",
    ),
    (
        "truncated body",
        _binary_input(12, [3]),
        bytes(8),
        r"binary_data_size is 12 but only 8 bytes .* remain",
    ),
    (
        "negative binary size",
        _binary_input(-4, [1]),
        bytes(4),
        r"binary_data_size must be a non-negative integer",
    ),
    (
        "bool binary size",
        _binary_input(True, [1]),
        bytes(4),
        r"binary_data_size must be a non-negative integer",
    ),
    (
        "leftover bytes",
        _binary_input(4, [1]),
        bytes(6),
        r"^2 bytes after the JSON header are not claimed",
    ),
    (
        "leftover without binary inputs",
        _input([1], [1]),
        bytes(3),
        r"^3 bytes after the JSON header",
    ),
    (
        "data and binary",
        {"inputs": [{**_binary_input(4, [1])["inputs"][0], "data": [1.0]}]},
        bytes(4),
        r"has both 'data' and parameters.binary_data_size",
    ),
    (
        "BOOL byte not 0/1",
        _binary_input(2, [2], "BOOL"),
        b"\x01\x02",
        r"BOOL raw data holds a byte other than 0 or 1",
    ),
    (
        "BYTES truncated length prefix",
        _binary_input(7, [2], "BYTES"),
        b"\x01\x00\x00\x00a\x05\x00",
        r"truncated inside the 4-byte length of element 1",
    ),
    (
        "BYTES element overrun",
        _binary_input(7, [1], "BYTES"),
        b"\x09\x00\x00\x00abc",
        r"BYTES element 0 declares 9 bytes but only 3 remain",
    ),
    (
        "BYTES too few",
        _binary_input(5, [2], "BYTES"),
        b"\x01\x00\x00\x00a",
        r"shape needs 2 BYTES elements, the data holds 1",
    ),
    (
        "BYTES too many",
        _binary_input(10, [1], "BYTES"),
        b"\x01\x00\x00\x00a\x01\x00\x00\x00b",
        r"more than the 1 elements",
    ),
    (
        "BYTES data for empty shape",
        _binary_input(4, [0], "BYTES"),
        b"\x00\x00\x00\x00",
        r"more than the 0 elements",
    ),
]


@pytest.mark.parametrize(
    ("doc", "tail", "pattern"), [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS]
)
def test_invalid_request_is_rejected_with_a_naming_message(
    doc: Any, tail: bytes | None, pattern: str
) -> None:
    with pytest.raises(InvalidInput, match=pattern):
        _decode(doc, tail)


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        (b"{not json", r"^request body is not valid JSON"),
        (b"", r"^request body is not valid JSON"),
        (b"[1, 2]", r"must be a JSON object, got array"),
        (
            b'{"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [NaN]}]}',
            r"not valid JSON",
        ),
    ],
    ids=["malformed", "empty", "array", "nan-literal"],
)
def test_body_that_is_not_a_json_object_is_rejected(body: bytes, pattern: str) -> None:
    with pytest.raises(InvalidInput, match=pattern):
        decode_infer_request(body, model_name="m", model_version=None, header_length=None)


def test_integer_beyond_64_bits_is_rejected() -> None:
    # orjson reads integers beyond 64 bits as floats, so the value is no longer an integer.
    body = (
        b'{"inputs":[{"name":"x","shape":[1],"datatype":"UINT64","data":[18446744073709551616]}]}'
    )

    with pytest.raises(InvalidInput, match=r"UINT64 data must be integers, got 1.844"):
        decode_infer_request(body, model_name="m", model_version=None, header_length=None)


@pytest.mark.parametrize("header_length", [-1, 10_000])
def test_header_length_outside_the_body_is_rejected(header_length: int) -> None:
    body = orjson.dumps(_input([1], [1]))

    with pytest.raises(
        InvalidInput,
        match=rf"Content-Length is {header_length} but the body is {len(body)} bytes",
    ):
        decode_infer_request(body, model_name="m", model_version=None, header_length=header_length)


def test_header_length_cutting_the_json_short_is_rejected() -> None:
    body = orjson.dumps(_input([1], [1]))

    with pytest.raises(InvalidInput, match="not valid JSON"):
        decode_infer_request(body, model_name="m", model_version=None, header_length=len(body) - 1)
