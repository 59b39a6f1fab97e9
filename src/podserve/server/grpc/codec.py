"""Open Inference Protocol gRPC messages <-> core tensors and requests.

Requests may carry tensor data either as typed `contents` or as `raw_input_contents`
(what tritonclient sends); both are decoded and every element count is checked against
the declared shape, naming the input that is wrong. Responses always carry
`raw_output_contents`: it is the one form tritonclient's `InferResult.as_numpy` reads
for every datatype (it ignores typed contents except `bytes_contents`), it is the only
form FP16 has, and it avoids one Python object per element.

Raw bytes, in and out, go through the one OIP raw-tensor codec the REST binary
extension uses too (`protocol/v2/raw.py`), so both edges accept, refuse and produce
exactly the same bytes.

Shared memory (Triton's extension, the same code as REST: `protocol/v2/shared_memory.py`):
an input that names a region in its parameters is read from it in place and takes no
entry of `raw_input_contents` (tritonclient sends raw contents only for the other
inputs, as Triton's own gRPC server expects); an output written to a region is answered
with its name, datatype and shape and an empty raw content, keeping the contents aligned
with the outputs as Triton does (ResponseAllocatorHelper, src/grpc/infer_handler.cc).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt
from google.protobuf.internal.containers import MessageMap

from podserve.core.errors import InvalidInput
from podserve.core.tensors import (
    Datatype,
    InferRequest,
    InferResponse,
    RequestedOutput,
    Tensor,
)
from podserve.protocol.v2.output_selection import output_name, requested_output
from podserve.protocol.v2.raw import BytesBudget, decode_tensor, encode_tensor
from podserve.protocol.v2.shape import check_shape
from podserve.protocol.v2.shared_memory import check_outputs, in_shared_memory, read_input
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.shm import RegionRef, SystemSharedMemory, region_ref, without_references

ParameterValue: TypeAlias = bool | int | float | str

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_UINT64_MAX = 2**64 - 1

# Which typed-contents field carries each datatype. FP16 has none: raw bytes only.
_CONTENTS_FIELD: dict[Datatype, str] = {
    Datatype.BOOL: "bool_contents",
    Datatype.INT8: "int_contents",
    Datatype.INT16: "int_contents",
    Datatype.INT32: "int_contents",
    Datatype.INT64: "int64_contents",
    Datatype.UINT8: "uint_contents",
    Datatype.UINT16: "uint_contents",
    Datatype.UINT32: "uint_contents",
    Datatype.UINT64: "uint64_contents",
    Datatype.FP32: "fp32_contents",
    Datatype.FP64: "fp64_contents",
    Datatype.BYTES: "bytes_contents",
}
# The protobuf scalar type of each contents field, as numpy reads it before narrowing.
_CONTENTS_WIDE_DTYPE: dict[str, np.dtype[Any]] = {
    "bool_contents": np.dtype(np.bool_),
    "int_contents": np.dtype(np.int32),
    "int64_contents": np.dtype(np.int64),
    "uint_contents": np.dtype(np.uint32),
    "uint64_contents": np.dtype(np.uint64),
    "fp32_contents": np.dtype(np.float32),
    "fp64_contents": np.dtype(np.float64),
}


# ---------------------------------------------------------------------------- parameters


def decode_parameters(
    params: Mapping[str, pb.InferParameter], where: str
) -> dict[str, ParameterValue]:
    """A protobuf `map<string, InferParameter>` as plain Python values."""
    out: dict[str, ParameterValue] = {}
    for key, param in params.items():
        choice = param.WhichOneof("parameter_choice")
        if choice is None:
            raise InvalidInput(f"{where} parameter {key!r} has no value")
        value: ParameterValue = getattr(param, choice)
        out[str(key)] = value
    return out


def encode_parameters(
    values: Mapping[str, Any], target: MessageMap[str, pb.InferParameter]
) -> None:
    """Write Python values into a protobuf `map<string, InferParameter>`.

    Raises TypeError for a value with no InferParameter form (a list, a dict, None):
    response parameters come from podserve itself, so such a value is a bug to surface.
    """
    for key, value in values.items():
        param = target[key]
        if isinstance(value, bool | np.bool_):
            param.bool_param = bool(value)
        elif isinstance(value, int | np.integer):
            number = int(value)
            if _INT64_MIN <= number <= _INT64_MAX:
                param.int64_param = number
            elif 0 <= number <= _UINT64_MAX:
                param.uint64_param = number
            else:
                raise TypeError(f"parameter {key!r}: {number} does not fit in 64 bits")
        elif isinstance(value, float | np.floating):
            param.double_param = float(value)
        elif isinstance(value, str):
            param.string_param = value
        else:
            raise TypeError(
                f"parameter {key!r}: a {type(value).__name__} has no InferParameter form"
            )


# ---------------------------------------------------------------------------- typed contents

# Typed contents become an array element by element, in C that holds the GIL: 15 M FP32
# elements in one call held the event loop 0.8 s even from the decoding thread
# (server/grpc/service.py). Converted this many at a time, the loop gets its turn between
# chunks, every few milliseconds.
_CHUNK = 1 << 16


def _chunked(values: Iterable[Any], dtype: np.dtype[Any], count: int) -> npt.NDArray[Any]:
    """`count` elements of `values` as an array, read through one iterator `_CHUNK` at a
    time."""
    items = iter(values)
    if count <= _CHUNK:
        return np.fromiter(items, dtype=dtype, count=count)
    out = np.empty(count, dtype=dtype)
    for start in range(0, count, _CHUNK):
        end = min(count, start + _CHUNK)
        out[start:end] = np.fromiter(items, dtype=dtype, count=end - start)
    return out


def _decode_contents(
    contents: pb.InferTensorContents,
    datatype: Datatype,
    shape: tuple[int, ...],
    name: str,
    budget: BytesBudget,
) -> Any:
    count = math.prod(shape)
    field = _CONTENTS_FIELD.get(datatype)
    if field is None:
        raise InvalidInput(
            f"input {name!r}: {datatype.value} has no typed contents field; "
            f"send it in raw_input_contents"
        )
    for descriptor, _ in contents.ListFields():
        if descriptor.name != field:
            raise InvalidInput(
                f"input {name!r} has datatype {datatype.value}: its elements belong in "
                f"contents.{field}, not contents.{descriptor.name}"
            )
    values = getattr(contents, field)
    if not values and count:
        raise InvalidInput(
            f"input {name!r} carries no data: set contents.{field} or raw_input_contents"
        )
    if len(values) != count:
        raise InvalidInput(
            f"input {name!r}: contents.{field} has {len(values)} elements; "
            f"shape {list(shape)} needs {count}"
        )
    if datatype is Datatype.BYTES:
        # The request's one BYTES bound, as for raw and shared-memory inputs, spent before
        # a Python object is made of an element: protobuf parsed them all already, but
        # each still becomes an array entry (1,048,576 of them in all, protocol/v2/raw.py).
        # Passed as data of 4 bytes an element, the length prefix raw data has, so the
        # count alone decides.
        budget.take(name, shape, count, count * 4)
        return _chunked(values, np.dtype(object), count).reshape(shape)
    wide = _chunked(values, _CONTENTS_WIDE_DTYPE[field], count)
    want = datatype.numpy_dtype
    if want != wide.dtype and wide.size:
        info = np.iinfo(want)
        low, high = int(wide.min()), int(wide.max())
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise InvalidInput(
                f"input {name!r}: value {bad} is outside the range of {datatype.value}"
            )
    return wide.astype(want, copy=False).reshape(shape)


# ---------------------------------------------------------------------------- requests


def _shape_of(dims: Iterable[int], name: str) -> tuple[int, ...]:
    shape = tuple(dims)  # protobuf's repeated int64 yields Python ints
    if shape and min(shape) < 0:
        raise InvalidInput(f"input {name!r}: shape {list(shape)} has a negative dimension")
    return check_shape(name, shape)


# Datatype by wire name: a dict lookup instead of the Enum call (a few microseconds each
# on Python 3.11); an unknown name falls through to Datatype.parse for its message.
_DATATYPE_BY_NAME: dict[str, Datatype] = {d.value: d for d in Datatype}


def _params(params: Mapping[str, pb.InferParameter], where: str) -> dict[str, ParameterValue]:
    # Nearly every request carries none; an empty protobuf map is falsy, and iterating it
    # costs more than this check (issue 16: the codec's share of gRPC's per-call CPU).
    return decode_parameters(params, where) if params else {}


def decode_infer_request(
    msg: pb.ModelInferRequest,
    *,
    request_id: str | None,
    shared_memory: SystemSharedMemory | None = None,
) -> InferRequest:
    """Validate and decode a ModelInferRequest. `request_id` comes from the transport
    (the edge decides it), not from the message; the deadline is the data plane's.
    Inputs that name a region of `shared_memory` are read from it in place.

    Written for the common case, on the gRPC edge's per-call path: each protobuf
    attribute read builds a Python view, so every field is read once, and parameters,
    contents and outputs are looked into only when present."""
    model_name = msg.model_name
    if not model_name:
        raise InvalidInput("model_name is required")
    raw_contents = msg.raw_input_contents
    # First pass: names, parameters and region references, to know how many inputs
    # must be carried in raw_input_contents before any is decoded.
    staged: list[tuple[Any, str, dict[str, ParameterValue], RegionRef | None]] = []
    carried = 0
    for item in msg.inputs:
        name = item.name
        params = _params(item.parameters, f"input {name!r}")
        ref = region_ref(params, f"input {name!r}") if params else None
        carried += ref is None
        staged.append((item, name, params, ref))
    use_raw = len(raw_contents) > 0
    if use_raw and len(raw_contents) != carried:
        raise InvalidInput(
            f"raw_input_contents has {len(raw_contents)} entries for {carried} inputs not in "
            f"shared memory; send exactly one per such input, in the order of inputs"
        )
    raw_index = 0
    tensors: list[Tensor] = []
    seen: set[str] = set()
    # BYTES elements of all inputs together (raw, typed and shared-memory), as on REST:
    # per tensor, a request of many inputs could hold the bound's memory many times over.
    budget = BytesBudget()
    for index, (item, name, params, ref) in enumerate(staged):
        if not name:
            raise InvalidInput(f"input {index} has no name")
        if name in seen:
            raise InvalidInput(f"input {name!r} appears more than once")
        seen.add(name)
        wire_datatype = item.datatype
        datatype = _DATATYPE_BY_NAME.get(wire_datatype)
        if datatype is None:
            try:
                datatype = Datatype.parse(wire_datatype)
            except InvalidInput as exc:
                raise InvalidInput(f"input {name!r}: {exc.message}") from None
        shape = _shape_of(item.shape, name)
        # HasField first: reading an unset submessage builds an empty one to list.
        has_contents = item.HasField("contents") and bool(item.contents.ListFields())
        if ref is not None:
            data = _from_region(shared_memory, name, datatype, shape, ref, has_contents, budget)
            params = without_references(params)
        elif use_raw:
            if has_contents:
                raise InvalidInput(
                    f"input {name!r} sets contents but the request uses raw_input_contents; "
                    f"use one form for all inputs"
                )
            data = decode_tensor(name, datatype, shape, raw_contents[raw_index], budget)
            raw_index += 1
        else:
            data = _decode_contents(item.contents, datatype, shape, name, budget)
        tensors.append(Tensor(name=name, datatype=datatype, data=data, parameters=params))

    outputs: list[RequestedOutput] = []
    if msg.outputs:
        names: set[str] = set()
        for index, wanted in enumerate(msg.outputs):
            # the checks REST's decoder runs, from the same module (the same answer)
            name = output_name(index, wanted.name, names)
            params = _params(wanted.parameters, f"requested output {name!r}")
            outputs.append(requested_output(name, params))
        check_outputs(shared_memory, outputs)

    return InferRequest(
        model_name=model_name,
        inputs=tuple(tensors),
        id=request_id,
        model_version=msg.model_version or None,
        outputs=tuple(outputs),
        parameters=_params(msg.parameters, "request"),
    )


def _from_region(
    shared_memory: SystemSharedMemory | None,
    name: str,
    datatype: Datatype,
    shape: tuple[int, ...],
    ref: RegionRef,
    has_contents: bool,
    budget: BytesBudget,
) -> Any:
    if has_contents:
        raise InvalidInput(
            f"input {name!r}: names a shared memory region and also carries contents; send one"
        )
    if shared_memory is None:
        raise InvalidInput(f"input {name!r}: shared memory is not available here")
    return read_input(shared_memory, name, datatype, shape, ref, budget)


# ---------------------------------------------------------------------------- responses


def encode_infer_response(
    response: InferResponse, *, request_id: str | None, message_id: str = ""
) -> pb.ModelInferResponse:
    """A ModelInferResponse with every output in raw_output_contents, in output order.
    Its id is the request message's `message_id`, verbatim, when it has one: Triton and
    the REST edge echo a request's `id` as it came, and a client matches answers by it
    (an id over 128 characters or with a tab was replaced by a random one, though only
    on success). `request_id`, the id the edge accepted for logs and trailers
    (core/ids.py), otherwise; the response's own id first, when it has one."""
    msg = pb.ModelInferResponse(
        model_name=response.model_name,
        model_version=response.model_version or "",
        id=message_id or response.id or request_id or "",
    )
    if response.parameters:
        encode_parameters(response.parameters, msg.parameters)
    raw: list[bytes] = []
    outputs = msg.outputs
    for tensor in response.outputs:
        out = outputs.add(name=tensor.name, datatype=tensor.datatype.value, shape=tensor.shape)
        if tensor.parameters:
            if in_shared_memory(tensor):  # already in the client's region
                raw.append(b"")
                continue
            encode_parameters(tensor.parameters, out.parameters)
        raw.append(encode_tensor(tensor.name, tensor.datatype, tensor.data))
    msg.raw_output_contents.extend(raw)
    return msg
