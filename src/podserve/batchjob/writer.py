"""JSONL output: one line per input record, in input order.

    {"id": 7, "line": 3, "outputs": {"label": 0}}                     a row-form line
    {"id": "7", "line": 4, "outputs": {"label": [0, 2]}}              an OIP-v2 line
    {"id": 8, "line": 5, "error": "line 5: missing input 'features'"}

A row-form line gets each output without the batch axis the reader added (a scalar label
for a scalar-per-row output), so what comes out mirrors what went in. An OIP-v2 line gets
whole tensors as nested lists. BYTES outputs are written as UTF-8 strings; a non-finite
float is written as null (JSON has no NaN).

The writer appends and keeps count of its size, so the checkpoint can record exactly how
many bytes of output are committed; `commit` makes them durable before that is recorded.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from podserve.batchjob.reader import DecodedLine
from podserve.batchjob.scoring import Outcome
from podserve.core.errors import InvalidInput, PodserveError
from podserve.core.tensors import Datatype, Tensor

_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


@dataclass(frozen=True, slots=True)
class EncodedLine:
    data: bytes
    is_error: bool


def encode_result(line: DecodedLine, outcome: Outcome | None) -> EncodedLine:
    """The output line for `line`: its error if it has one, else `outcome`'s tensors. An
    output JSON cannot carry (non-UTF-8 bytes) turns the line into an error line."""
    if line.error is not None:
        error = line.error
    elif outcome is None:
        error = f"line {line.number}: no outcome"
    elif isinstance(outcome, PodserveError):
        error = f"line {line.number}: {outcome.message}"
    else:
        try:
            outputs = {t.name: _json_value(t, line.row_form) for t in outcome}
        except InvalidInput as exc:
            error = f"line {line.number}: {exc.message}"
        else:
            record = {"id": line.id, "line": line.number, "outputs": outputs}
            return EncodedLine(orjson.dumps(record, option=_OPTIONS), is_error=False)
    record = {"id": line.id, "line": line.number, "error": error}
    return EncodedLine(orjson.dumps(record, option=_OPTIONS), is_error=True)


def _json_value(tensor: Tensor, row_form: bool) -> Any:
    data = tensor.data
    if row_form and data.ndim and data.shape[0] == 1:
        data = data[0]
    if tensor.datatype is Datatype.BYTES:
        return _texts(tensor.name, data)
    # orjson writes numpy arrays and scalars itself, at their own precision (FP32 stays
    # short); it needs C-contiguous arrays.
    return np.ascontiguousarray(data) if isinstance(data, np.ndarray) else data


def _texts(name: str, data: Any) -> Any:
    array = np.asarray(data, dtype=object)
    texts = np.empty(array.shape, dtype=object)
    flat_out = texts.reshape(-1)
    for i, item in enumerate(array.reshape(-1).tolist()):
        if isinstance(item, str):
            flat_out[i] = item
            continue
        try:
            flat_out[i] = bytes(item).decode("utf-8")
        except (UnicodeDecodeError, TypeError):
            raise InvalidInput(
                f"output {name!r} holds bytes that are not UTF-8 text; JSONL cannot carry them"
            ) from None
    return texts.tolist()


class ResultWriter:
    """Appends output lines after the committed prefix of the file.

    Opening truncates the file to `committed_size_bytes`: whatever lies beyond was written
    by a run that died before recording it, and will be written again."""

    def __init__(self, path: Path, committed_size_bytes: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        self._file = os.fdopen(fd, "r+b")
        self._file.truncate(committed_size_bytes)
        self._file.seek(committed_size_bytes)
        self._size_bytes = committed_size_bytes

    @property
    def size_bytes(self) -> int:
        return self._size_bytes

    def write(self, line: bytes) -> None:
        self._file.write(line)
        self._size_bytes += len(line)

    def commit(self) -> int:
        """Make everything written durable; returns the size that is now safe to record."""
        self._file.flush()
        os.fsync(self._file.fileno())
        return self._size_bytes

    def close(self) -> None:
        self._file.close()
