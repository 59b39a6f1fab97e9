"""Zero-copy safetensors loading for CPU: the tensors are views into a private memory map
of the file, so the weights exist once in host memory (as page-cache pages), never twice.

`safetensors.safe_open(...).get_tensor` copies each tensor out of its mapping: while the
file is open that is the mapped pages plus the copies, about 2x the weights at peak. Here
the mapping itself backs the tensors. It is private (copy-on-write), so torch gets the
writable buffer it requires and the file on disk can never be modified through it.

Format (https://github.com/huggingface/safetensors): 8-byte little-endian header length,
a JSON header {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": ...},
then the data, offsets relative to the end of the header.
"""

from __future__ import annotations

import json
import mmap
import struct
from pathlib import Path
from typing import Any

from podserve.core.errors import ModelLoadFailed

_DTYPE_NAMES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}
_MAX_HEADER_BYTES = 100 * 1024 * 1024


def mmap_state_dict(torch: Any, path: Path) -> tuple[dict[str, Any], mmap.mmap]:
    """The file's tensors as views into one mapping, and the mapping (keep it alive as
    long as the tensors)."""
    with path.open("rb") as handle:
        try:
            mapping = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY)
        except ValueError as exc:  # an empty file cannot be mapped
            raise ModelLoadFailed(f"{path.name}: not a safetensors file ({exc})") from exc
    try:
        (header_len,) = struct.unpack("<Q", mapping[:8])
        if header_len > _MAX_HEADER_BYTES or 8 + header_len > len(mapping):
            raise ValueError(f"header length {header_len} does not fit the file")
        header = json.loads(mapping[8 : 8 + header_len])
        data_start = 8 + header_len
        state: dict[str, Any] = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            dtype = getattr(torch, _DTYPE_NAMES[info["dtype"]])
            begin, end = info["data_offsets"]
            shape = tuple(int(d) for d in info["shape"])
            itemsize = torch.empty((), dtype=dtype).element_size()
            count = (end - begin) // itemsize
            if data_start + end > len(mapping) or count != _numel(shape):
                raise ValueError(f"tensor {name!r}: offsets do not match its shape")
            if count == 0:
                state[name] = torch.empty(shape, dtype=dtype)
                continue
            flat = torch.frombuffer(mapping, dtype=dtype, count=count, offset=data_start + begin)
            state[name] = flat.reshape(shape)
    except (KeyError, ValueError, TypeError, struct.error) as exc:
        mapping.close()
        raise ModelLoadFailed(f"{path.name}: not a valid safetensors file ({exc})") from exc
    return state, mapping


def _numel(shape: tuple[int, ...]) -> int:
    count = 1
    for dim in shape:
        count *= dim
    return count
