"""JSONL input: raw lines with their byte offsets, and each line decoded into a request.

Two line forms are accepted:

    {"id": 7, "inputs": {"features": [5.1, 3.5, 1.4, 0.2]}}            row form
    {"id": "7", "inputs": [{"name": "features", "shape": [1, 4],
                            "datatype": "FP32", "data": [5.1, 3.5, 1.4, 0.2]}]}   OIP-v2 form

A row-form value is one row: scalar, string or nested list. It gets a leading batch axis
of 1 and the datatype the model declares for that input, so the file stays as plain as
the data. An OIP-v2 line is decoded by the same codec as the REST endpoint, so it means
exactly what the same body would mean there (any batch size, explicit datatype).

A line that cannot be decoded becomes a `DecodedLine` carrying the error, never an
exception: one bad line must not stop the job.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

import orjson

from podserve.core.errors import InvalidInput, PodserveError
from podserve.core.tensors import InferRequest, Tensor, TensorSpec
from podserve.protocol.v2.decode import decode_infer_request
from podserve.protocol.v2.json_data import array_from_json, json_type

# What a line's "id" may be; it is echoed back unchanged.
LineId = str | int | float | None


@dataclass(frozen=True, slots=True)
class RawLine:
    number: int  # 1-based line number in the input file
    data: bytes
    end_offset_bytes: int  # where the next line starts: the resume point after this one


@dataclass(frozen=True, slots=True)
class DecodedLine:
    """One input line: a request to score, or the reason it cannot be scored.

    `row_form` lines get their outputs back one row at a time (the batch axis the reader
    added is removed again); OIP-v2 lines get whole tensors back."""

    number: int
    id: LineId
    request: InferRequest | None
    error: str | None
    row_form: bool
    rows: int


def iter_lines(stream: IO[bytes], *, start_line: int, start_offset_bytes: int) -> Iterator[RawLine]:
    """Lines from `start_offset_bytes` on, numbered after `start_line`. Blank lines are
    numbered but not yielded: a trailing newline or an empty line is not a record."""
    stream.seek(start_offset_bytes)
    number, offset = start_line, start_offset_bytes
    for data in stream:
        number += 1
        offset += len(data)
        if data.strip():
            yield RawLine(number=number, data=data, end_offset_bytes=offset)


class LineDecoder:
    """Decodes lines for one model, using its declared inputs (after `load`, which may
    have filled them in from the artefact)."""

    def __init__(self, model_name: str, inputs: tuple[TensorSpec, ...]) -> None:
        self._model_name = model_name
        self._inputs = {spec.name: spec for spec in inputs}

    def decode(self, line: RawLine) -> DecodedLine:
        try:
            doc = orjson.loads(line.data)
        except orjson.JSONDecodeError as exc:
            return _failed(line.number, None, f"line {line.number}: not valid JSON: {exc}")
        if type(doc) is not dict:
            return _failed(
                line.number,
                None,
                f"line {line.number}: expected a JSON object, got {json_type(doc)}",
            )
        line_id = doc.get("id")
        if line_id is not None and type(line_id) not in (str, int, float):
            return _failed(
                line.number, None, f"line {line.number}: 'id' must be a string or number"
            )
        inputs = doc.get("inputs")
        try:
            if type(inputs) is dict:
                request, row_form = self._row_form(inputs, line_id), True
            elif type(inputs) is list:
                request, row_form = self._oip_form(line.data), False
            else:
                raise InvalidInput(
                    f"'inputs' must be an object (name -> value) or an OIP-v2 array, "
                    f"got {json_type(inputs)}"
                )
        except PodserveError as exc:
            return _failed(line.number, line_id, f"line {line.number}: {exc.message}")
        return DecodedLine(
            number=line.number,
            id=line_id,
            request=request,
            error=None,
            row_form=row_form,
            rows=_rows(request),
        )

    def _row_form(self, inputs: dict[str, Any], line_id: LineId) -> InferRequest:
        tensors = []
        for name, value in inputs.items():
            spec = self._inputs.get(name)
            if spec is None:
                if not self._inputs:
                    raise InvalidInput(
                        f"model {self._model_name!r} declares no inputs, so input {name!r} "
                        "has no datatype; use the OIP-v2 line form with 'datatype'"
                    )
                raise InvalidInput(
                    f"unknown input {name!r}; model {self._model_name!r} expects "
                    f"{sorted(self._inputs)}"
                )
            shape = (1, *_nested_shape(value))
            data = array_from_json(name, spec.datatype, shape, [value])
            tensors.append(Tensor(name=name, datatype=spec.datatype, data=data))
        return InferRequest(
            model_name=self._model_name,
            inputs=tuple(tensors),
            id=None if line_id is None else str(line_id),
        )

    def _oip_form(self, data: bytes) -> InferRequest:
        return decode_infer_request(
            data, model_name=self._model_name, model_version=None, header_length=None
        )


def _nested_shape(value: object) -> tuple[int, ...]:
    """The shape a regularly nested list has, read along its first elements; a ragged
    list is caught afterwards, when its element count does not match."""
    shape: list[int] = []
    while type(value) is list:
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _rows(request: InferRequest) -> int:
    for tensor in request.inputs:
        return int(tensor.data.shape[0]) if tensor.data.ndim else 1
    return 1


def _failed(number: int, line_id: LineId, error: str) -> DecodedLine:
    return DecodedLine(number=number, id=line_id, request=None, error=error, row_form=True, rows=0)
