"""The one codec of Open Inference Protocol raw tensor bytes, for every edge: the REST
binary-data extension (chunks after the JSON header) and gRPC's `raw_input_contents` /
`raw_output_contents` are the same encoding, so they share this code and its decisions.

Encoding (OIP v2, kserve/open-inference-protocol, "Raw Tensor Data"; Triton's
binary_tensor_data extension): elements little-endian, row-major, no padding; BOOL is one
byte, 0 or 1; a BYTES element is a 4-byte little-endian unsigned length followed by that
many bytes.

Decisions, the same on both edges:
- a BOOL byte other than 0 or 1 is refused (InvalidInput): numpy would keep it inside a
  "boolean" that prints True but compares unequal to True;
- the data must hold exactly the elements the shape declares (InvalidInput naming the
  input, the shape and both sizes); BYTES arrays are sized by the elements the data
  holds, never by the declared shape, so a huge declared shape cannot exhaust memory;
- a BYTES tensor holds at most `MAX_BYTES_ELEMENTS` elements (a REST request, all its
  binary BYTES inputs together: `BytesBudget`), checked on the declared shape before a
  byte is split. Each element becomes a Python bytes object (33 bytes of header, and a
  pointer in the list and in the array: ~50 bytes for an empty one), so 4 bytes of wire
  cost ~12x that in memory: 64 MB of one-byte elements took the pod's RSS from 733 to
  1,620 MB, and the split, a Python loop, held the GIL 28.7 s. The bound keeps one
  request's objects near 50 MB, and the split under ~0.5 s;
- decoded arrays are fresh, aligned, writable copies: a view into a request buffer would
  be read-only and possibly misaligned, which some runtimes (torch) warn about or reject,
  and the copy costs one memcpy next to the socket read that preceded it;
- an output the model got wrong (a BYTES element that is not bytes or str, one over the
  protocol's 4 GiB element limit, numbers of another dtype than the declared datatype:
  never a silent cast) is `InferenceFailed` naming the output: a clean 500 / INTERNAL
  with the reason.
"""

from __future__ import annotations

import math
import struct
from typing import Any

import numpy as np
import numpy.typing as npt

from podserve.core.errors import InferenceFailed, InvalidInput
from podserve.core.tensors import Datatype

_LENGTH = struct.Struct("<I")
MAX_ELEMENT_BYTES = 2**32 - 1  # a BYTES element's length must fit its 4-byte prefix
MAX_BYTES_ELEMENTS = 1 << 20  # BYTES elements decoded per tensor or request (module doc)


class BytesBudget:
    """The BYTES elements a request may still decode, `MAX_BYTES_ELEMENTS` in all."""

    __slots__ = ("left",)

    def __init__(self, limit: int = MAX_BYTES_ELEMENTS) -> None:
        self.left = limit

    def take(self, name: str, shape: tuple[int, ...], count: int, data_bytes: int) -> None:
        """Spend `count` elements of input `name`, or raise InvalidInput naming it.
        Data too short for its shape (`data_bytes` hold at most a quarter as many
        elements) passes when that many are within the bound: the split refuses it
        then, saying how many it holds."""
        if count > self.left and not (
            data_bytes < count * _LENGTH.size and data_bytes // _LENGTH.size <= self.left
        ):
            spent = MAX_BYTES_ELEMENTS - self.left
            others = f" (other inputs of the request hold {spent})" if spent else ""
            raise InvalidInput(
                f"input {name!r}: shape {list(shape)} holds {count} BYTES elements; a "
                f"request may hold at most {MAX_BYTES_ELEMENTS}{others}: send fewer, longer "
                "elements or split the request"
            )
        self.left -= count


def decode_tensor(
    name: str,
    datatype: Datatype,
    shape: tuple[int, ...],
    chunk: bytes | memoryview,
    budget: BytesBudget | None = None,
) -> npt.NDArray[Any]:
    """Decode one input's raw data into an array of `shape`; raise InvalidInput naming
    the input when the data does not hold exactly that many elements. BYTES elements are
    spent from `budget` (a request's), or from a budget of this tensor's own."""
    count = math.prod(shape)
    if datatype is Datatype.BYTES:
        (budget or BytesBudget()).take(name, shape, count, len(chunk))
        return decode_bytes(name, memoryview(chunk), count).reshape(shape)
    dtype = datatype.numpy_dtype
    expected = count * dtype.itemsize
    if len(chunk) != expected:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} of {datatype.value} needs {expected} bytes "
            f"of raw data, got {len(chunk)}"
        )
    if datatype is Datatype.BOOL:
        raw = np.frombuffer(chunk, dtype=np.uint8)
        if raw.size and int(raw.max()) > 1:
            raise InvalidInput(f"input {name!r}: BOOL raw data holds a byte other than 0 or 1")
        return raw.astype(np.bool_).reshape(shape)
    # `astype` both converts from the wire's little-endian order and copies.
    return np.frombuffer(chunk, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)


def encode_tensor(name: str, datatype: Datatype, data: npt.NDArray[Any]) -> bytes:
    """The raw encoding of `data` (any shape, read row-major) as `datatype`."""
    if datatype is Datatype.BYTES:
        return encode_bytes(name, data)
    want = datatype.numpy_dtype
    array = np.asarray(data)
    if array.dtype.kind != want.kind or array.dtype.itemsize != want.itemsize:
        # never a silent cast: float64 sent as FP32 would lose precision unnoticed
        raise InferenceFailed(
            f"output {name!r}: the model returned data of dtype {array.dtype}, which is not "
            f"its datatype {datatype.value}"
        )
    # The wire is little-endian whatever the host; no copy when it already is and the
    # array is C-contiguous.
    return np.ascontiguousarray(array, dtype=want.newbyteorder("<")).tobytes()


def decode_bytes(name: str, chunk: memoryview, count: int) -> npt.NDArray[Any]:
    """Split length-prefixed BYTES elements into a flat object array of `count` bytes.
    The caller bounds `count` (`BytesBudget`); the elements are read from the data, so
    no more are made than the data holds."""
    # One copy of the chunk, then each element is one slice of it: slicing a memoryview
    # and copying that out made two objects per element, and cost twice the time.
    data = chunk.tobytes()
    end = len(data)
    items: list[bytes] = []
    append = items.append
    unpack = _LENGTH.unpack_from
    offset = 0
    for index in range(count):
        if offset == end:
            raise InvalidInput(
                f"input {name!r}: shape needs {count} BYTES elements, the data holds {index}"
            )
        if end - offset < _LENGTH.size:
            raise InvalidInput(
                f"input {name!r}: BYTES data is truncated inside the 4-byte length of "
                f"element {index}"
            )
        (length,) = unpack(data, offset)
        start = offset + _LENGTH.size
        offset = start + length
        if offset > end:
            raise InvalidInput(
                f"input {name!r}: BYTES element {index} declares {length} bytes but only "
                f"{end - start} remain"
            )
        append(data[start:offset])
    if offset != end:
        raise InvalidInput(
            f"input {name!r}: BYTES data holds more than the {count} elements its shape "
            f"needs ({end - offset} bytes left over)"
        )
    # Filling an empty object array never lets numpy guess at nesting.
    out = np.empty(count, dtype=object)
    out[:] = items
    return out


def encode_bytes(name: str, data: npt.NDArray[Any]) -> bytes:
    """Length-prefix every element of a BYTES array (row-major); `str` goes as UTF-8."""
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in np.asarray(data).reshape(-1).tolist():
        value = as_bytes(name, item)
        if len(value) > MAX_ELEMENT_BYTES:
            raise InferenceFailed(
                f"output {name!r}: a BYTES element of {len(value)} bytes exceeds the "
                f"protocol's 4 GiB element limit"
            )
        parts.append(pack(len(value)))
        parts.append(value)
    return b"".join(parts)


def as_bytes(name: str, item: object) -> bytes:
    """One BYTES element as bytes: models may return `str` as well as `bytes`."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, bytearray | memoryview):
        return bytes(item)
    raise InferenceFailed(
        f"output {name!r}: a BYTES element must be bytes or str, the model returned "
        f"{type(item).__name__}"
    )
