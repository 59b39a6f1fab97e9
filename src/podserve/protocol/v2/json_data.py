"""Tensor data as JSON arrays: the `data` field of inputs and outputs.

Decoding lets numpy parse the whole (possibly nested) list in C and infer a dtype, then
checks that dtype's kind once, instead of looking at each element in Python. That keeps the
common case (a few hundred FP32 numbers) at a few microseconds while still rejecting what
a plain `np.asarray(data, dtype=float32)` would silently coerce: strings ("1.5" → 1.5),
booleans as numbers, floats truncated to integers, integers wrapped out of range.

Accepted, following the spec and Triton: `data` nested in any regular way or flat, read
row-major; its element count must equal the product of `shape`. Integer JSON numbers are
accepted for floating-point datatypes; BOOL takes only true/false; BYTES only strings
(sent on as their UTF-8 bytes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype
from podserve.protocol.v2.raw import as_bytes

_FLOATS = frozenset({Datatype.FP16, Datatype.FP32, Datatype.FP64})


def array_from_json(
    name: str,
    datatype: Datatype,
    shape: tuple[int, ...],
    data: object,
    *,
    may_hold_bools: bool = True,
) -> npt.NDArray[Any]:
    """Decode an input's `data` into an array of `datatype` and `shape`.
    `may_hold_bools=False` (the caller saw no `true`/`false` in the JSON text) skips the
    per-element search for booleans mixed into numeric data."""
    if type(data) is not list:
        raise InvalidInput(f"input {name!r}: data must be a JSON array, got {json_type(data)}")
    count = math.prod(shape)
    if datatype is Datatype.BYTES:
        return _bytes_from_json(name, data, shape, count)
    try:
        raw = np.asarray(data)
    except ValueError:
        raise InvalidInput(
            f"input {name!r}: data is a ragged nested array; nest it regularly or flatten it"
        ) from None
    if raw.size != count:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} needs {count} elements, got {raw.size}"
        )
    dtype = datatype.numpy_dtype
    if count == 0:
        # An empty list infers float64; there is nothing to check or convert.
        return np.empty(shape, dtype=dtype)
    kind = raw.dtype.kind
    if datatype is Datatype.BOOL:
        if kind != "b":
            raise InvalidInput(
                f"input {name!r}: BOOL data must be true/false, got {_first_offender(raw)}"
            )
        return raw.reshape(shape)
    if may_hold_bools and kind in "iuf" and _holds_bool(data):
        # numpy read true as 1 and false as 0: a client's mistake, not a number
        raise InvalidInput(f"input {name!r}: {datatype.value} data must be numbers, got a boolean")
    if datatype in _FLOATS:
        if kind not in "fiu":
            raise InvalidInput(
                f"input {name!r}: {datatype.value} data must be numbers, got {_first_offender(raw)}"
            )
        if datatype is Datatype.FP64:
            # Parsed JSON numbers are float64 or 64-bit integers: nothing can overflow.
            return raw.astype(dtype, copy=False).reshape(shape)
        try:
            # JSON has no infinities, so an infinity after the cast is an overflow.
            with np.errstate(over="raise"):
                return raw.astype(dtype, copy=False).reshape(shape)
        except FloatingPointError:
            raise InvalidInput(
                f"input {name!r}: a value is outside the range of {datatype.value}"
            ) from None
    if kind in "iu":
        if raw.dtype != dtype:  # already the target type (INT64, say): in range by construction
            _check_int_range(name, datatype, int(raw.min()), int(raw.max()))
        return raw.astype(dtype, copy=False).reshape(shape)
    return _ints_slow(name, datatype, data, shape)


def json_values(name: str, datatype: Datatype, data: npt.NDArray[Any]) -> object | None:
    """The JSON `data` value for an output, flat and row-major; None when JSON cannot carry
    it exactly (a NaN or infinity, or BYTES that are not UTF-8), so the caller sends it as
    binary instead. Numeric arrays are returned as contiguous numpy arrays for orjson's
    OPT_SERIALIZE_NUMPY, which writes the shortest text that parses back to the same value
    at the array's own precision (FP16 and FP32 stay exact)."""
    if datatype is Datatype.BYTES:
        texts: list[str] = []
        for item in data.reshape(-1).tolist():
            if isinstance(item, str):
                texts.append(item)
                continue
            try:
                texts.append(as_bytes(name, item).decode("utf-8"))
            except UnicodeDecodeError:
                return None
        return texts
    flat = np.ascontiguousarray(data.reshape(-1), dtype=datatype.numpy_dtype)
    if datatype in _FLOATS and not np.isfinite(flat).all():
        return None
    return flat


def json_type(value: object) -> str:
    """The JSON name of a parsed value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _holds_bool(data: list[Any]) -> bool:
    """Whether a (regularly nested) list holds a bool; `map(type, ...)` keeps the scan
    in C (about 20 ns an element)."""
    if data and type(data[0]) is list:
        return any(_holds_bool(row) for row in data)
    return bool in map(type, data)


def _check_int_range(name: str, datatype: Datatype, low: int, high: int) -> None:
    info = np.iinfo(datatype.numpy_dtype)
    if low < info.min or high > info.max:
        bad = low if low < info.min else high
        raise InvalidInput(
            f"input {name!r}: value {bad} is outside the range of {datatype.value} "
            f"[{info.min}, {info.max}]"
        )


def _ints_slow(
    name: str, datatype: Datatype, data: list[Any], shape: tuple[int, ...]
) -> npt.NDArray[Any]:
    """Integers numpy could not type as int64/uint64: either a mistake (floats, strings,
    booleans) or UINT64 values above 2**63 mixed with others, which numpy infers as float64
    (rounding them) or object. Re-read the original elements as Python objects, exactly,
    to tell which; this path never runs for ordinary integer data."""
    flat = np.asarray(data, dtype=object).reshape(-1).tolist()
    for item in flat:
        # `type(...) is int` rather than isinstance: JSON true/false parse as bool, an int.
        if type(item) is not int:
            raise InvalidInput(
                f"input {name!r}: {datatype.value} data must be integers, got {item!r}"
            )
    _check_int_range(name, datatype, min(flat), max(flat))
    return np.array(flat, dtype=datatype.numpy_dtype).reshape(shape)


def _first_offender(raw: npt.NDArray[Any]) -> str:
    """What the elements were instead, judged from the dtype numpy inferred for them."""
    kind = raw.dtype.kind
    if kind == "b":
        return "booleans"
    if kind in "US":
        return "strings"
    if kind in "iuf":
        return "numbers"
    for item in raw.reshape(-1).tolist():
        if type(item) not in (int, float):
            return f"a {json_type(item)}"
    return "a mix of types"


def _bytes_from_json(
    name: str, data: list[Any], shape: tuple[int, ...], count: int
) -> npt.NDArray[Any]:
    try:
        items = np.asarray(data, dtype=object)
    except ValueError:
        raise InvalidInput(
            f"input {name!r}: data is a ragged nested array; nest it regularly or flatten it"
        ) from None
    if items.size != count:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} needs {count} elements, got {items.size}"
        )
    encoded: list[bytes] = []
    for item in items.reshape(-1).tolist():
        if type(item) is not str:
            raise InvalidInput(
                f"input {name!r}: BYTES data in JSON must be strings, got a {json_type(item)}"
            )
        try:
            encoded.append(item.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidInput(f"input {name!r}: a BYTES string is not valid UTF-8") from None
    out = np.empty(count, dtype=object)
    out[:] = encoded
    return out.reshape(shape)
