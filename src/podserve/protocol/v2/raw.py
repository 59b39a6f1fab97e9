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


def decode_tensor(
    name: str, datatype: Datatype, shape: tuple[int, ...], chunk: bytes | memoryview
) -> npt.NDArray[Any]:
    """Decode one input's raw data into an array of `shape`; raise InvalidInput naming
    the input when the data does not hold exactly that many elements."""
    count = math.prod(shape)
    if datatype is Datatype.BYTES:
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
    """Split length-prefixed BYTES elements into a flat object array of `count` bytes."""
    end = len(chunk)
    # Elements are read from the data and the array is sized by what was read, never by
    # the declared count: a huge declared shape cannot exhaust memory.
    items: list[bytes] = []
    offset = 0
    unpack = _LENGTH.unpack_from
    while offset < end:
        if len(items) == count:
            raise InvalidInput(
                f"input {name!r}: BYTES data holds more than the {count} elements its shape "
                f"needs ({end - offset} bytes left over)"
            )
        if end - offset < _LENGTH.size:
            raise InvalidInput(
                f"input {name!r}: BYTES data is truncated inside the 4-byte length of "
                f"element {len(items)}"
            )
        (length,) = unpack(chunk, offset)
        offset += _LENGTH.size
        if end - offset < length:
            raise InvalidInput(
                f"input {name!r}: BYTES element {len(items)} declares {length} bytes but only "
                f"{end - offset} remain"
            )
        items.append(bytes(chunk[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise InvalidInput(
            f"input {name!r}: shape needs {count} BYTES elements, the data holds {len(items)}"
        )
    # Filling an empty object array never lets numpy guess at nesting.
    out = np.empty(len(items), dtype=object)
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
