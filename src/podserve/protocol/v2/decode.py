"""Decode Open Inference Protocol v2 REST request bodies into core messages.

Transport-free: the edge hands over the body bytes, the model name and version from the
URL, and the `Inference-Header-Content-Length` header when present. Every problem raises
`InvalidInput` with a message that names the input (or field) and what is wrong.

Decisions where the spec leaves room:
- Unknown fields (top level, in inputs, in outputs) are ignored, as Triton does: clients
  commonly send `model_name` in the body, and extensions add fields. The model name and
  version come from the URL only.
- Parameter values are kept as given (request `timeout`, `priority`, sequence ids...): the
  data plane interprets them. Only the binary-extension parameters are checked here,
  because this codec acts on them: `binary_data_size` is an int >= 0, `binary_data` and
  `binary_data_output` are booleans. `binary_data_size` is consumed, not passed on; so
  are an input's shared-memory parameters (its data is read from the region).
- Duplicate input or output names are an error (the second would silently win). The
  requested outputs are checked by `protocol/v2/output_selection.py`, which the gRPC
  decoder runs too.
- When a header length is given, the binary chunks must account for every byte after the
  JSON header: leftover bytes mean client and server disagree about the layout.

Cost (one 1x300 FP32 input built by tritonclient, best of 5 x 20k on a shared dev core):
about 22 us as JSON (orjson.loads ~8 us and np.asarray ~6-9 us of it) and 8 us as binary.
"""

from __future__ import annotations

from typing import Any

import orjson

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, InferRequest, RequestedOutput, Tensor
from podserve.protocol.v2.json_data import array_from_json, json_type
from podserve.protocol.v2.output_selection import output_name, requested_output
from podserve.protocol.v2.raw import BytesBudget, decode_tensor
from podserve.protocol.v2.shape import check_shape
from podserve.protocol.v2.shared_memory import check_outputs, read_input
from podserve.shm import SystemSharedMemory, region_ref, without_references

INFERENCE_HEADER_CONTENT_LENGTH = "Inference-Header-Content-Length"

_DATATYPES: dict[str, Datatype] = {d.value: d for d in Datatype}


def parse_header_length(value: str | None) -> int | None:
    """The `Inference-Header-Content-Length` header as an int (None when absent)."""
    if value is None:
        return None
    text = value.strip()
    # isdigit() alone accepts Unicode digits such as "²", which int() then refuses.
    if not (text.isascii() and text.isdigit()):
        raise InvalidInput(
            f"{INFERENCE_HEADER_CONTENT_LENGTH} must be a non-negative integer, got {value!r}"
        )
    return int(text)


def decode_infer_request(
    body: bytes,
    *,
    model_name: str,
    model_version: str | None,
    header_length: int | None,
    shared_memory: SystemSharedMemory | None = None,
) -> InferRequest:
    """Decode an inference request body; binary tensor data follows the first
    `header_length` bytes of JSON when `header_length` is given. Inputs that name a
    region of `shared_memory` are read from it in place; outputs that name one are
    checked against it (see protocol/v2/shared_memory.py)."""
    view = memoryview(body)
    if header_length is None:
        doc = _load_object(view)
        offset = len(view)
    else:
        if not 0 <= header_length <= len(view):
            raise InvalidInput(
                f"{INFERENCE_HEADER_CONTENT_LENGTH} is {header_length} but the body is "
                f"{len(view)} bytes"
            )
        doc = _load_object(view[:header_length])
        offset = header_length

    raw_inputs = doc.get("inputs")
    if raw_inputs is None:
        raise InvalidInput("inference request has no 'inputs'")
    if type(raw_inputs) is not list:
        raise InvalidInput(f"'inputs' must be an array, got {json_type(raw_inputs)}")
    inputs: list[Tensor] = []
    names: set[str] = set()
    # JSON booleans in numeric data are refused (True is 1 to numpy); finding one costs a
    # look at every element, which a body that never spells true or false can skip. Only
    # the JSON part is searched: `in` on bytes holds the GIL, and over a 60 MB binary part
    # it held it (and so the event loop) ~45 ms, for bytes that hold no JSON.
    json_text = body if offset == len(body) else body[:offset]
    bools = b"true" in json_text or b"false" in json_text
    budget = BytesBudget()  # BYTES elements, all binary and shared-memory inputs together
    for index, item in enumerate(raw_inputs):
        tensor, offset = _decode_input(
            index, item, view, offset, header_length, shared_memory, budget, bools
        )
        if tensor.name in names:
            raise InvalidInput(f"input {tensor.name!r} is given more than once")
        names.add(tensor.name)
        inputs.append(tensor)
    if offset != len(view):
        raise InvalidInput(
            f"{len(view) - offset} bytes after the JSON header are not claimed by any "
            "input's parameters.binary_data_size"
        )

    request_id = doc.get("id")
    if request_id is not None and type(request_id) is not str:
        raise InvalidInput(f"'id' must be a string, got {json_type(request_id)}")
    parameters = _parameters(doc.get("parameters"), "request")
    flag = parameters.get("binary_data_output")
    if flag is not None and type(flag) is not bool:
        raise InvalidInput(
            f"request parameters.binary_data_output must be a boolean, got {json_type(flag)}"
        )
    outputs = _decode_outputs(doc.get("outputs"))
    check_outputs(shared_memory, outputs)
    return InferRequest(
        model_name=model_name,
        model_version=model_version,
        id=request_id,
        inputs=tuple(inputs),
        outputs=outputs,
        parameters=parameters,
    )


def decode_repository_index_request(body: bytes) -> bool:
    """The `ready` flag of a `POST /v2/repository/index` body (empty body: False)."""
    if not body.strip():
        return False
    ready = _load_object(memoryview(body)).get("ready", False)
    if type(ready) is not bool:
        raise InvalidInput(f"'ready' must be a boolean, got {json_type(ready)}")
    return ready


def _load_object(data: memoryview) -> dict[str, Any]:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"request body is not valid JSON: {exc}") from None
    if type(doc) is not dict:
        raise InvalidInput(f"request body must be a JSON object, got {json_type(doc)}")
    return doc


def _decode_input(
    index: int,
    item: object,
    view: memoryview,
    offset: int,
    header_length: int | None,
    shared_memory: SystemSharedMemory | None,
    budget: BytesBudget,
    bools: bool = True,
) -> tuple[Tensor, int]:
    """One input tensor, and the offset of the next binary chunk."""
    if type(item) is not dict:
        raise InvalidInput(f"inputs[{index}] must be an object, got {json_type(item)}")
    name = item.get("name")
    if type(name) is not str or not name:
        raise InvalidInput(f"inputs[{index}]: 'name' must be a non-empty string")
    raw_datatype = item.get("datatype")
    # A list or object here is unhashable: look up strings only.
    datatype = _DATATYPES.get(raw_datatype) if type(raw_datatype) is str else None
    if datatype is None:
        if raw_datatype is None:
            raise InvalidInput(f"input {name!r}: 'datatype' is missing")
        allowed = ", ".join(_DATATYPES)
        raise InvalidInput(
            f"input {name!r}: unknown datatype {raw_datatype!r}; expected one of {allowed}"
        )
    shape = _shape(name, item.get("shape"))
    parameters = _parameters(item.get("parameters"), f"input {name!r}")

    ref = region_ref(parameters, f"input {name!r}")
    if ref is not None:
        if "data" in item or "binary_data_size" in parameters:
            raise InvalidInput(
                f"input {name!r}: names a shared memory region and also carries data; send one"
            )
        if shared_memory is None:
            raise InvalidInput(f"input {name!r}: shared memory is not available here")
        data = read_input(shared_memory, name, datatype, shape, ref, budget)
        return Tensor(name, datatype, data, without_references(parameters)), offset

    size = parameters.get("binary_data_size")
    if size is None:
        if "data" not in item:
            raise InvalidInput(
                f"input {name!r}: has neither 'data', parameters.binary_data_size nor "
                "parameters.shared_memory_region"
            )
        data = array_from_json(name, datatype, shape, item["data"], may_hold_bools=bools)
        return Tensor(name, datatype, data, parameters), offset

    if "data" in item:
        raise InvalidInput(
            f"input {name!r}: has both 'data' and parameters.binary_data_size; send one"
        )
    if header_length is None:
        raise InvalidInput(
            f"input {name!r}: parameters.binary_data_size is set but the request has no "
            f"{INFERENCE_HEADER_CONTENT_LENGTH} header"
        )
    if type(size) is not int or size < 0:
        raise InvalidInput(
            f"input {name!r}: parameters.binary_data_size must be a non-negative integer, "
            f"got {size!r}"
        )
    end = offset + size
    if end > len(view):
        raise InvalidInput(
            f"input {name!r}: parameters.binary_data_size is {size} but only "
            f"{len(view) - offset} bytes of binary data remain in the body"
        )
    data = decode_tensor(name, datatype, shape, view[offset:end], budget)
    rest = {key: value for key, value in parameters.items() if key != "binary_data_size"}
    return Tensor(name, datatype, data, rest), end


def _shape(name: str, shape: object) -> tuple[int, ...]:
    if type(shape) is not list:
        raise InvalidInput(
            f"input {name!r}: 'shape' must be an array of non-negative integers, "
            f"got {json_type(shape)}"
        )
    for dim in shape:
        # `type(dim) is int` rejects booleans and floats such as 2.0.
        if type(dim) is not int or dim < 0:
            raise InvalidInput(
                f"input {name!r}: 'shape' must be an array of non-negative integers, "
                f"got {orjson.dumps(shape).decode()}"
            )
    return check_shape(name, tuple(shape))


def _parameters(value: object, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if type(value) is not dict:
        raise InvalidInput(f"{where}: 'parameters' must be an object, got {json_type(value)}")
    return value


def _decode_outputs(value: object) -> tuple[RequestedOutput, ...]:
    if value is None:
        return ()
    if type(value) is not list:
        raise InvalidInput(f"'outputs' must be an array, got {json_type(value)}")
    outputs: list[RequestedOutput] = []
    names: set[str] = set()
    for index, item in enumerate(value):
        if type(item) is not dict:
            raise InvalidInput(f"outputs[{index}] must be an object, got {json_type(item)}")
        name = output_name(index, item.get("name"), names)
        parameters = _parameters(item.get("parameters"), f"output {name!r}")
        outputs.append(requested_output(name, parameters))
    return tuple(outputs)
