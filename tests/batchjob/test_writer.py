"""Output lines and the committed-prefix file writer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import orjson

from podserve.batchjob import DecodedLine, ResultWriter, encode_result
from podserve.core.errors import InferenceFailed
from podserve.core.tensors import Datatype, Tensor


def _line(*, row_form: bool = True, error: str | None = None) -> DecodedLine:
    return DecodedLine(number=3, id=7, request=None, error=error, row_form=row_form, rows=1)


def test_row_form_outputs_lose_the_batch_axis_the_reader_added() -> None:
    outcome = (
        Tensor("label", Datatype.BYTES, np.array([b"positive"], dtype=object)),
        Tensor("score", Datatype.FP32, np.array([0.9], dtype=np.float32)),
        Tensor("proba", Datatype.FP32, np.array([[0.25, 0.75]], dtype=np.float32)),
    )
    encoded = encode_result(_line(), outcome)
    assert not encoded.is_error
    assert encoded.data.endswith(b"\n")
    assert orjson.loads(encoded.data) == {
        "id": 7,
        "line": 3,
        "outputs": {"label": "positive", "score": 0.9, "proba": [0.25, 0.75]},
    }


def test_oip_form_outputs_keep_whole_tensors() -> None:
    outcome = (Tensor("label", Datatype.INT64, np.array([0, 2], dtype=np.int64)),)
    encoded = encode_result(_line(row_form=False), outcome)
    assert orjson.loads(encoded.data)["outputs"] == {"label": [0, 2]}


def test_errors_are_lines_too() -> None:
    decode_error = encode_result(_line(error="line 3: not valid JSON"), None)
    model_error = encode_result(_line(), InferenceFailed("boom"))
    assert decode_error.is_error
    assert model_error.is_error
    assert orjson.loads(decode_error.data) == {
        "id": 7,
        "line": 3,
        "error": "line 3: not valid JSON",
    }
    assert orjson.loads(model_error.data)["error"] == "line 3: boom"


def test_bytes_that_are_not_text_make_an_error_line_not_a_crash() -> None:
    outcome = (Tensor("raw", Datatype.BYTES, np.array([b"\xff\xfe"], dtype=object)),)
    encoded = encode_result(_line(), outcome)
    assert encoded.is_error
    assert "not UTF-8" in orjson.loads(encoded.data)["error"]


def test_opening_drops_everything_after_the_committed_prefix(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    path.write_bytes(b'{"line":1}\n{"line":2, "outp')
    writer = ResultWriter(path, committed_size_bytes=len(b'{"line":1}\n'))
    writer.write(b'{"line":2}\n')
    assert writer.commit() == path.stat().st_size
    writer.close()
    assert path.read_bytes() == b'{"line":1}\n{"line":2}\n'
