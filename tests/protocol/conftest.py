"""Shared samples for the OIP v2 REST codec tests: one array per datatype that reaches the
edges of its range (integer limits, FP16 subnormals, empty and non-ASCII BYTES)."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from podserve.core.tensors import Datatype


def bytes_array(items: list[bytes], shape: tuple[int, ...]) -> npt.NDArray[Any]:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def _ints(dtype: type[np.integer[Any]]) -> npt.NDArray[Any]:
    info = np.iinfo(dtype)
    return np.array([[info.min, 0, 1], [7, info.max - 1, info.max]], dtype=dtype)


SAMPLES: dict[Datatype, npt.NDArray[Any]] = {
    Datatype.BOOL: np.array([[True, False, True], [False, False, True]]),
    Datatype.UINT8: _ints(np.uint8),
    Datatype.UINT16: _ints(np.uint16),
    Datatype.UINT32: _ints(np.uint32),
    Datatype.UINT64: _ints(np.uint64),
    Datatype.INT8: _ints(np.int8),
    Datatype.INT16: _ints(np.int16),
    Datatype.INT32: _ints(np.int32),
    Datatype.INT64: _ints(np.int64),
    Datatype.FP16: np.array([[0.1, -2.5, 65504.0], [6e-8, -0.0, 1 / 3]], dtype=np.float16),
    Datatype.FP32: np.array([[0.1, -2.5, 3.4e38], [1e-45, -0.0, 1 / 3]], dtype=np.float32),
    Datatype.FP64: np.array([[0.1, -2.5, 1.7e308], [5e-324, -0.0, 1 / 3]], dtype=np.float64),
    # UTF-8 only, so that the same sample can travel as JSON strings.
    Datatype.BYTES: bytes_array(
        [b"", b"a", "h\u00e9llo \u4e16\u754c".encode(), b"x" * 300, b"0", b"\n"], (2, 3)
    ),
}


@pytest.fixture(params=list(Datatype), ids=lambda d: d.value)
def datatype(request: pytest.FixtureRequest) -> Datatype:
    value: Datatype = request.param
    return value


@pytest.fixture
def sample(datatype: Datatype) -> npt.NDArray[Any]:
    return SAMPLES[datatype]
