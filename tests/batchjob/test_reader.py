"""Input lines: both forms, offsets for resuming, and errors that name the line."""

from __future__ import annotations

import io

import numpy as np
import pytest

from podserve.batchjob import LineDecoder, RawLine, iter_lines
from podserve.core.tensors import Datatype, TensorSpec

IRIS_INPUTS = (TensorSpec("features", Datatype.FP32, (-1, 4)),)
TEXT_INPUTS = (TensorSpec("text", Datatype.BYTES, (-1,)),)


def _line(data: bytes, number: int = 1) -> RawLine:
    return RawLine(number=number, data=data, end_offset_bytes=len(data))


def test_offsets_and_numbers_resume_exactly_where_they_left_off() -> None:
    data = b'{"a":1}\n\n{"b":2}\n{"c":3}'
    lines = list(iter_lines(io.BytesIO(data), start_line=0, start_offset_bytes=0))
    assert [(r.number, r.data.strip()) for r in lines] == [
        (1, b'{"a":1}'),
        (3, b'{"b":2}'),
        (4, b'{"c":3}'),
    ]  # the blank line 2 is numbered, not yielded
    assert lines[-1].end_offset_bytes == len(data)
    resumed = list(
        iter_lines(io.BytesIO(data), start_line=3, start_offset_bytes=lines[1].end_offset_bytes)
    )
    assert [(r.number, r.data) for r in resumed] == [(4, b'{"c":3}')]


def test_row_form_gets_a_batch_axis_and_the_declared_datatype() -> None:
    decoded = LineDecoder("iris", IRIS_INPUTS).decode(
        _line(b'{"id": 7, "inputs": {"features": [5.1, 3.5, 1, 0.2]}}')
    )
    assert decoded.error is None
    assert decoded.request is not None
    assert (decoded.id, decoded.rows, decoded.row_form) == (7, 1, True)
    (tensor,) = decoded.request.inputs
    assert tensor.datatype is Datatype.FP32
    assert tensor.data.dtype == np.float32
    assert tensor.shape == (1, 4)


def test_row_form_scalar_string() -> None:
    decoded = LineDecoder("s", TEXT_INPUTS).decode(_line(b'{"id": "a", "inputs": {"text": "hi"}}'))
    assert decoded.request is not None
    (tensor,) = decoded.request.inputs
    assert tensor.shape == (1,)
    assert tensor.data.tolist() == [b"hi"]


def test_oip_form_keeps_its_own_batch() -> None:
    body = (
        b'{"id": "x", "inputs": [{"name": "features", "shape": [2, 4], "datatype": "FP32",'
        b' "data": [1, 2, 3, 4, 5, 6, 7, 8]}]}'
    )
    decoded = LineDecoder("iris", IRIS_INPUTS).decode(_line(body))
    assert decoded.error is None
    assert (decoded.id, decoded.rows, decoded.row_form) == ("x", 2, False)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"id": 1, "inputs": {"features": [1, 2', "not valid JSON"),
        (b"[1, 2]", "expected a JSON object, got array"),
        (b'{"id": 1, "inputs": {"petals": [1, 2, 3, 4]}}', "unknown input 'petals'"),
        (b'{"id": 1, "inputs": {"features": ["a", "b", "c", "d"]}}', "must be numbers"),
        (b'{"id": 1, "inputs": {"features": [[1, 2], [3]]}}', "ragged"),
        (b'{"id": 1, "inputs": 3}', "'inputs' must be an object"),
        (b'{"id": {"x": 1}, "inputs": {}}', "'id' must be a string or number"),
    ],
)
def test_bad_lines_become_errors_that_name_the_line(data: bytes, message: str) -> None:
    decoded = LineDecoder("iris", IRIS_INPUTS).decode(_line(data, number=42))
    assert decoded.request is None
    assert decoded.error is not None
    assert decoded.error.startswith("line 42: ")
    assert message in decoded.error


def test_a_model_without_declared_inputs_needs_the_oip_form() -> None:
    decoded = LineDecoder("m", ()).decode(_line(b'{"inputs": {"x": [1]}}'))
    assert decoded.error is not None
    assert "declares no inputs" in decoded.error
