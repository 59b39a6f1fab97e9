"""Binary tensor data extension: tensors as raw little-endian bytes after the JSON header.

Fixed-size datatypes are their elements back to back, row-major, no padding; BOOL is one
byte of 0 or 1. A BYTES element is a 4-byte little-endian unsigned length followed by that
many bytes. Decoded arrays are always fresh, aligned, writable copies: a view into the
request body would be read-only and possibly misaligned, which some runtimes (torch) warn
about or reject, and the copy costs one memcpy next to the socket read that preceded it.
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
_MAX_ELEMENT_BYTES = 2**32 - 1


def array_from_binary(
    name: str, datatype: Datatype, shape: tuple[int, ...], chunk: memoryview
) -> npt.NDArray[Any]:
    """Decode one input's binary chunk into an array of `shape`; raise InvalidInput naming
    the input when the chunk does not hold exactly that many elements."""
    count = math.prod(shape)
    if datatype is Datatype.BYTES:
        return deserialize_bytes(name, chunk, count).reshape(shape)
    dtype = datatype.numpy_dtype
    expected = count * dtype.itemsize
    if len(chunk) != expected:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} of {datatype.value} needs {expected} bytes "
            f"of binary data, parameters.binary_data_size gives {len(chunk)}"
        )
    if datatype is Datatype.BOOL:
        raw = np.frombuffer(chunk, dtype=np.uint8)
        # Any byte other than 0/1 would become a bool numpy prints as True but compares
        # unequal to True; the spec allows only 0 and 1.
        if raw.size and int(raw.max()) > 1:
            raise InvalidInput(f"input {name!r}: BOOL binary data holds a byte other than 0 or 1")
        return raw.astype(np.bool_).reshape(shape)
    # `astype` both converts from the wire's little-endian order and copies.
    return np.frombuffer(chunk, dtype=dtype.newbyteorder("<")).astype(dtype).reshape(shape)


def array_to_binary(datatype: Datatype, data: npt.NDArray[Any]) -> bytes:
    """The binary encoding of `data` (any shape, read row-major) as `datatype`."""
    if datatype is Datatype.BYTES:
        return serialize_bytes(data)
    wire = datatype.numpy_dtype.newbyteorder("<")
    # No copy when the array is already little-endian and C-contiguous.
    return np.ascontiguousarray(data, dtype=wire).tobytes()


def deserialize_bytes(name: str, chunk: memoryview, count: int) -> npt.NDArray[Any]:
    """Split length-prefixed BYTES elements into a flat object array of `count` bytes."""
    items: list[bytes] = []
    end = len(chunk)
    offset = 0
    unpack = _LENGTH.unpack_from
    while offset < end:
        if len(items) == count:
            raise InvalidInput(
                f"input {name!r}: BYTES binary data holds more than the {count} elements "
                f"its shape needs ({end - offset} bytes left over)"
            )
        if end - offset < 4:
            raise InvalidInput(
                f"input {name!r}: BYTES binary data is truncated inside the 4-byte length "
                f"of element {len(items)}"
            )
        (length,) = unpack(chunk, offset)
        offset += 4
        if end - offset < length:
            raise InvalidInput(
                f"input {name!r}: BYTES element {len(items)} declares {length} bytes but only "
                f"{end - offset} remain"
            )
        items.append(bytes(chunk[offset : offset + length]))
        offset += length
    if len(items) != count:
        raise InvalidInput(
            f"input {name!r}: shape needs {count} BYTES elements, binary data holds {len(items)}"
        )
    return _object_array(items)


def serialize_bytes(data: npt.NDArray[Any]) -> bytes:
    """Length-prefix every element of a BYTES array (row-major). `str` elements are sent
    as UTF-8; anything else is a model bug, reported as InferenceFailed."""
    parts: list[bytes] = []
    pack = _LENGTH.pack
    for item in data.reshape(-1).tolist():
        value = as_bytes(item)
        if len(value) > _MAX_ELEMENT_BYTES:
            raise InferenceFailed(
                f"BYTES element of {len(value)} bytes exceeds the protocol's 4 GiB element limit"
            )
        parts.append(pack(len(value)))
        parts.append(value)
    return b"".join(parts)


def as_bytes(item: object) -> bytes:
    """One BYTES element as bytes: models may return `str` as well as `bytes`."""
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, bytearray | memoryview):
        return bytes(item)
    raise InferenceFailed(
        f"a BYTES output element must be bytes or str, the model returned {type(item).__name__}"
    )


def _object_array(items: list[bytes]) -> npt.NDArray[Any]:
    # np.array(items, dtype=object) would be fine for bytes, but filling an empty array
    # never lets numpy guess at nesting, whatever the elements are.
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out
