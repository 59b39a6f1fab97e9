"""Tensors in registered shared-memory regions, and the REST bodies of Triton's
shared-memory extension (docs/protocol/extension_shared_memory.md in
github.com/triton-inference-server/server).

Inputs are read in place: a fixed-size tensor is a read-only numpy view of the region,
no copy, as the gRPC codec's raw views are (a misaligned offset, or BOOL, which must be
checked byte by byte, costs one copy). BYTES elements are length-prefixed as in the
binary extension. Outputs are written straight into the region, one copy from the
model's array, and leave the response as name, datatype and shape only: the client reads
the values from its own mapping.

Sizes are exact: an input's `shared_memory_byte_size` must be what its shape and
datatype take (Triton's check), and an output's must be at least what the result takes.
Triton answers a too-small output region with INTERNAL; the region is the client's
choice, so podserve answers 400 with the same words.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
from collections.abc import Iterable
from typing import Any

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from podserve.core.errors import InferenceFailed, InvalidInput
from podserve.core.tensors import Datatype, InferRequest, InferResponse, RequestedOutput, Tensor
from podserve.protocol.json_body import parse_body
from podserve.protocol.v2.raw import BytesBudget, decode_bytes, decode_tensor, encode_bytes
from podserve.shm import (
    SHARED_MEMORY_REGION,
    CudaRegionStatus,
    RegionRef,
    RegionStatus,
    SystemSharedMemory,
    region_ref,
)


def read_input(
    regions: SystemSharedMemory,
    name: str,
    datatype: Datatype,
    shape: tuple[int, ...],
    ref: RegionRef,
    budget: BytesBudget | None = None,
) -> npt.NDArray[Any]:
    """The input `name` as it lies in its region (BYTES elements spent from `budget`,
    protocol/v2/raw.py)."""
    count = math.prod(shape)
    if datatype is Datatype.BYTES:
        (budget or BytesBudget()).take(name, shape, count, ref.byte_size)
    view = regions.view(ref.region, ref.offset, ref.byte_size)
    if datatype is Datatype.BYTES:
        strings: npt.NDArray[Any] = decode_bytes(name, view, count).reshape(shape)
        return strings
    expected = count * datatype.item_size_bytes
    if ref.byte_size != expected:
        raise InvalidInput(
            f"input {name!r}: shape {list(shape)} of {datatype.value} needs {expected} bytes, "
            f"shared_memory_byte_size gives {ref.byte_size}"
        )
    if datatype is Datatype.BOOL:
        return decode_tensor(name, datatype, shape, view)  # checks every byte is 0 or 1
    wire = datatype.numpy_dtype.newbyteorder("<")
    array: npt.NDArray[Any] = np.frombuffer(view, dtype=wire).reshape(shape)
    if not array.flags.aligned or array.dtype != datatype.numpy_dtype:
        array = array.astype(datatype.numpy_dtype)  # a copy; still the same values
    # The client owns this memory: a model must not write into it.
    array.flags.writeable = False
    return array


def check_output(regions: SystemSharedMemory, ref: RegionRef) -> None:
    """Refuse an output region that does not exist or does not fit, before the request
    costs any compute (Triton looks the region up when it parses the request)."""
    regions.view(ref.region, ref.offset, ref.byte_size).release()


def check_outputs(regions: SystemSharedMemory | None, outputs: Iterable[RequestedOutput]) -> None:
    """`check_output` for every requested output that names a region."""
    for wanted in outputs:
        ref = region_ref(wanted.parameters, f"output {wanted.name!r}")
        if ref is not None:
            if regions is None:
                raise InvalidInput(f"output {wanted.name!r}: shared memory is not available here")
            check_output(regions, ref)


def write_outputs(
    regions: SystemSharedMemory, request: InferRequest, response: InferResponse
) -> InferResponse:
    """Write every output the request placed in shared memory into its region."""
    refs = {}
    for wanted in request.outputs:
        ref = region_ref(wanted.parameters, f"output {wanted.name!r}")
        if ref is not None:
            refs[wanted.name] = ref
    if not refs:
        return response
    outputs = tuple(
        tensor if tensor.name not in refs else _write(regions, tensor, refs[tensor.name])
        for tensor in response.outputs
    )
    return dataclasses.replace(response, outputs=outputs)


def in_shared_memory(tensor: Tensor) -> bool:
    """Whether an output was written to shared memory (encoders send no data for it)."""
    return SHARED_MEMORY_REGION in tensor.parameters


def owned(request: InferRequest) -> InferRequest:
    """The request with the inputs read in place copied out of their regions, for what
    outlives the request (the payload log, written later on its own thread, while the
    client is already reusing its region)."""
    if not any(_in_region(t.data) for t in request.inputs):
        return request
    inputs = tuple(
        dataclasses.replace(t, data=np.array(t.data)) if _in_region(t.data) else t
        for t in request.inputs
    )
    return dataclasses.replace(request, inputs=inputs)


def _in_region(array: npt.NDArray[Any]) -> bool:
    """Whether the array's memory is a mapped region (its base is a view of an mmap)."""
    base: object = array
    while isinstance(base, np.ndarray):
        base = base.base
    return isinstance(base, memoryview) and isinstance(base.obj, mmap.mmap)


def _write(regions: SystemSharedMemory, tensor: Tensor, ref: RegionRef) -> Tensor:
    payload: bytes | None = None
    if tensor.datatype is Datatype.BYTES:
        payload = encode_bytes(tensor.name, tensor.data)
        size = len(payload)
    else:
        want = tensor.datatype.numpy_dtype
        got = tensor.data.dtype
        if got.kind != want.kind or got.itemsize != want.itemsize:
            # the raw codec's rule: never a silent cast
            raise InferenceFailed(
                f"output {tensor.name!r}: the model returned data of dtype {got}, which is "
                f"not its datatype {tensor.datatype.value}"
            )
        size = tensor.data.size * want.itemsize
    if size > ref.byte_size:
        raise InvalidInput(
            f"shared memory size specified with the request for output '{tensor.name}' "
            f"({ref.byte_size} bytes) should be at least {size} bytes to hold the results"
        )
    if size:
        view = regions.view(ref.region, ref.offset, size)
        if payload is not None:
            view[:] = payload
        else:
            wire = tensor.datatype.numpy_dtype.newbyteorder("<")
            target = np.frombuffer(view, dtype=wire).reshape(tensor.data.shape)
            target[...] = tensor.data
            del target  # lets the view go
        view.release()
    return Tensor(
        tensor.name, tensor.datatype, tensor.data, {**tensor.parameters, **ref.as_parameters()}
    )


# --- REST bodies of the register and status endpoints ---------------------------------
class _SystemRegister(BaseModel):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(min_length=1)
    offset: int = Field(0, ge=0, strict=True)
    byte_size: int = Field(ge=1, strict=True)


@dataclasses.dataclass(frozen=True, slots=True)
class SystemRegisterRequest:
    key: str
    offset: int
    byte_size: int


def decode_system_register(body: bytes) -> SystemRegisterRequest:
    """`{"key": "/name", "offset": 0, "byte_size": 64}` (what tritonclient sends)."""
    parsed = parse_body(body, _SystemRegister)
    return SystemRegisterRequest(parsed.key, parsed.offset, parsed.byte_size)


def system_status_json(rows: list[RegionStatus]) -> list[dict[str, Any]]:
    return [
        {"name": r.name, "key": r.key, "offset": r.offset, "byte_size": r.byte_size} for r in rows
    ]


def cuda_status_json(rows: list[CudaRegionStatus]) -> list[dict[str, Any]]:
    return [{"name": r.name, "device_id": r.device_id, "byte_size": r.byte_size} for r in rows]
