"""Bring your own code: the `simple` model that Triton's client examples are written for.

Two inputs `INPUT0` and `INPUT1` of shape [-1, 16]; `OUTPUT0` is their sum and `OUTPUT1`
their difference, element by element. Triton's own example repository serves it as a
TensorFlow graph (docs/examples/model_repository/simple/config.pbtxt in
github.com/triton-inference-server/server); here it is a few lines of numpy, so the
programs in tritonclient's examples run unchanged against podserve.

The same code serves two model directories, told apart by the datatype model.yaml
declares:

    simple/          INT32 in, INT32 out
    simple_string/   BYTES in, BYTES out: each element is an integer written as text
                     (b"7"), and so is each result (Triton's `simple_string`)

INT32 arithmetic wraps around on overflow, as it does in the TensorFlow graph.
"""

from __future__ import annotations

import numpy as np

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, InferRequest, Tensor
from podserve.core.types import Array
from podserve.runtimes import ModelAPI, Payload

INPUTS = ("INPUT0", "INPUT1")


class SimpleModel(ModelAPI):
    def preprocess(self, request: InferRequest) -> Payload:
        # The engine already ran `validate` (the base class's): both inputs are present
        # with the declared datatype and a [-1, 16] shape.
        given = request.input_map()
        return {name: _as_int32(name, given[name].data) for name in INPUTS}

    def predict(self, batch: Payload) -> Payload:
        a, b = batch["INPUT0"], batch["INPUT1"]
        with np.errstate(over="ignore"):  # wrap around, like the TensorFlow graph
            return {"OUTPUT0": a + b, "OUTPUT1": a - b}

    def warmup_request(self, model_name: str) -> InferRequest | None:
        # The default warm-up sends empty strings, which are no integers: send "0"s.
        request = super().warmup_request(model_name)
        if request is None or not _is_text(self):
            return request
        zeros = tuple(
            Tensor(t.name, t.datatype, np.full(t.shape, b"0", dtype=object)) for t in request.inputs
        )
        return InferRequest(model_name=model_name, inputs=zeros)

    def postprocess(self, outputs: Payload, request: InferRequest) -> tuple[Tensor, ...]:
        if _is_text(self):
            outputs = {name: _as_text(array) for name, array in outputs.items()}
        return super().postprocess(outputs, request)


def _is_text(model: ModelAPI) -> bool:
    """simple_string: model.yaml declares BYTES."""
    return bool(model.inputs) and model.inputs[0].datatype is Datatype.BYTES


def _as_int32(name: str, data: Array) -> Array:
    if data.dtype != object:
        return data.astype(np.int32, copy=False)
    flat = data.reshape(-1)
    values = np.empty(flat.shape, dtype=np.int32)
    for index, item in enumerate(flat):
        try:
            values[index] = int(bytes(item).decode("ascii"))
        except (UnicodeDecodeError, ValueError, OverflowError):
            raise InvalidInput(
                f"input {name!r}: element {index} is {bytes(item)[:32]!r}, "
                "not an INT32 written as text"
            ) from None
    return values.reshape(data.shape)


def _as_text(array: Array) -> Array:
    out = np.empty(array.shape, dtype=object)
    out.reshape(-1)[:] = [str(int(v)).encode("ascii") for v in array.reshape(-1)]
    return out
