"""Tensor types shared by every layer: the Open Inference Protocol datatypes, named
tensors backed by numpy arrays, and the request/response messages of the data plane.

BYTES tensors are numpy object arrays whose elements are `bytes`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from podserve.core.errors import InvalidInput


class Datatype(enum.StrEnum):
    BOOL = "BOOL"
    UINT8 = "UINT8"
    UINT16 = "UINT16"
    UINT32 = "UINT32"
    UINT64 = "UINT64"
    INT8 = "INT8"
    INT16 = "INT16"
    INT32 = "INT32"
    INT64 = "INT64"
    FP16 = "FP16"
    FP32 = "FP32"
    FP64 = "FP64"
    BYTES = "BYTES"

    @property
    def numpy_dtype(self) -> np.dtype[Any]:
        return _TO_NUMPY[self]

    @property
    def item_size_bytes(self) -> int:
        """Bytes per element in the binary encoding; 0 for variable-size BYTES."""
        return 0 if self is Datatype.BYTES else _TO_NUMPY[self].itemsize

    @classmethod
    def parse(cls, name: str) -> Datatype:
        try:
            return cls(name)
        except ValueError:
            allowed = ", ".join(d.value for d in cls)
            raise InvalidInput(f"unknown datatype {name!r}; expected one of {allowed}") from None

    @classmethod
    def from_numpy(cls, dtype: np.dtype[Any]) -> Datatype:
        if dtype.kind in ("O", "S", "U"):
            return cls.BYTES
        try:
            return _FROM_NUMPY[np.dtype(dtype)]
        except KeyError:
            raise InvalidInput(
                f"numpy dtype {dtype} has no Open Inference Protocol datatype"
            ) from None


_TO_NUMPY: dict[Datatype, np.dtype[Any]] = {
    Datatype.BOOL: np.dtype(np.bool_),
    Datatype.UINT8: np.dtype(np.uint8),
    Datatype.UINT16: np.dtype(np.uint16),
    Datatype.UINT32: np.dtype(np.uint32),
    Datatype.UINT64: np.dtype(np.uint64),
    Datatype.INT8: np.dtype(np.int8),
    Datatype.INT16: np.dtype(np.int16),
    Datatype.INT32: np.dtype(np.int32),
    Datatype.INT64: np.dtype(np.int64),
    Datatype.FP16: np.dtype(np.float16),
    Datatype.FP32: np.dtype(np.float32),
    Datatype.FP64: np.dtype(np.float64),
    Datatype.BYTES: np.dtype(object),
}
_FROM_NUMPY: dict[np.dtype[Any], Datatype] = {
    v: k for k, v in _TO_NUMPY.items() if k is not Datatype.BYTES
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """Declared metadata of a model input or output. -1 in `shape` means any size."""

    name: str
    datatype: Datatype
    shape: tuple[int, ...]

    def accepts_shape(self, shape: tuple[int, ...]) -> bool:
        return len(shape) == len(self.shape) and all(
            want == -1 or want == got for want, got in zip(self.shape, shape, strict=True)
        )


@dataclass(frozen=True, slots=True)
class Tensor:
    """A named tensor. `data` has the numpy dtype of `datatype` and the given shape."""

    name: str
    datatype: Datatype
    data: npt.NDArray[Any]
    parameters: Mapping[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(d) for d in self.data.shape)

    @classmethod
    def from_array(cls, name: str, data: npt.NDArray[Any]) -> Tensor:
        return cls(name=name, datatype=Datatype.from_numpy(data.dtype), data=data)


@dataclass(frozen=True, slots=True)
class RequestedOutput:
    name: str
    binary_data: bool | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class InferRequest:
    """A decoded inference request, independent of REST or gRPC."""

    model_name: str
    inputs: tuple[Tensor, ...]
    id: str | None = None
    model_version: str | None = None
    outputs: tuple[RequestedOutput, ...] = ()
    parameters: Mapping[str, Any] = field(default_factory=dict)
    # Absolute deadline on the monotonic clock; None means no deadline.
    deadline_s: float | None = None

    def input_map(self) -> dict[str, Tensor]:
        return {t.name: t for t in self.inputs}


@dataclass(frozen=True, slots=True)
class InferResponse:
    model_name: str
    outputs: tuple[Tensor, ...]
    model_version: str | None = None
    id: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)
