"""Text generation as tensors, the interface of Triton's vLLM backend
(src/utils/request.py and src/model.py in github.com/triton-inference-server/
vllm_backend), so tritonclient programs written for it work against podserve's
generative models over gRPC ModelStreamInfer.

Inputs (all shape [1]; extra leading 1-dimensions are accepted):

    text_input               BYTES  the prompt (required)
    stream                   BOOL   one response per token batch (default false)
    exclude_input_in_output  BOOL   leave the prompt out of the text (default: true when
                                    streaming, which also refuses false, as vLLM's does)
    sampling_parameters      BYTES  a JSON object: temperature, top_p, top_k, seed, stop,
                                    max_tokens (16 by default, as vLLM), ignore_eos

Without `sampling_parameters`, the request's own parameters are read as the sampling
fields, as the backend does; numbers given as strings (what older clients send) are
accepted. Output: `text_output`, BYTES [1], the new text (streaming) or the whole text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, InferRequest, InferResponse, Tensor
from podserve.protocol.json_body import parse_body
from podserve.protocol.v2.generate import GenerateParameters

TEXT_INPUT = "text_input"
TEXT_OUTPUT = "text_output"
_FLAGS = ("stream", "exclude_input_in_output")
_KNOWN = frozenset({TEXT_INPUT, "sampling_parameters", *_FLAGS})


@dataclass(frozen=True, slots=True)
class TextRequest:
    prompt: str
    stream: bool
    prepend_prompt: bool
    parameters: GenerateParameters


def asks_for_generation(request: InferRequest) -> bool:
    """Whether a tensor request speaks this interface (it carries `text_input`)."""
    return any(t.name == TEXT_INPUT for t in request.inputs)


def decode_text_request(request: InferRequest) -> TextRequest:
    given = request.input_map()
    unknown = sorted(set(given) - _KNOWN)
    if unknown:
        raise InvalidInput(
            f"unknown input(s) {unknown} for text generation; expected {sorted(_KNOWN)}"
        )
    prompt = _text(given[TEXT_INPUT])
    stream = _flag(given.get("stream"), default=False)
    exclude = given.get("exclude_input_in_output")
    # Unset: the prompt is prepended unless streaming (vLLM backend's default).
    prepend = not stream if exclude is None else not _flag(exclude, default=True)
    if prepend and stream:
        raise InvalidInput("When streaming, `exclude_input_in_output` = False is not allowed.")
    sampling = given.get("sampling_parameters")
    if sampling is not None:
        try:
            parameters = parse_body(_text(sampling).encode(), GenerateParameters)
        except InvalidInput as exc:
            raise InvalidInput(f"input 'sampling_parameters': {exc.message}") from None
    else:
        parameters = _from_request_parameters(request.parameters)
    return TextRequest(prompt, stream, prepend, parameters)


def text_response(
    request: InferRequest, version: str, text: str, parameters: Mapping[str, Any]
) -> InferResponse:
    data = np.empty(1, dtype=object)
    data[0] = text.encode("utf-8")
    return InferResponse(
        model_name=request.model_name,
        model_version=version,
        id=request.id,
        outputs=(Tensor(TEXT_OUTPUT, Datatype.BYTES, data),),
        parameters=parameters,
    )


def _one(tensor: Tensor) -> Any:
    if math.prod(tensor.shape) != 1:
        raise InvalidInput(
            f"input {tensor.name!r} must hold one element, got shape {list(tensor.shape)}"
        )
    return tensor.data.reshape(-1)[0]


def _text(tensor: Tensor) -> str:
    if tensor.datatype is not Datatype.BYTES:
        raise InvalidInput(f"input {tensor.name!r} must be BYTES, got {tensor.datatype.value}")
    try:
        return bytes(_one(tensor)).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"input {tensor.name!r} must be UTF-8 text") from None


def _flag(tensor: Tensor | None, *, default: bool) -> bool:
    if tensor is None:
        return default
    if tensor.datatype is not Datatype.BOOL:
        raise InvalidInput(f"input {tensor.name!r} must be BOOL, got {tensor.datatype.value}")
    return bool(_one(tensor))


def _from_request_parameters(parameters: Mapping[str, Any]) -> GenerateParameters:
    fields = set(GenerateParameters.model_fields)
    values = {k: _number(v) for k, v in parameters.items() if k in fields}
    return parse_body(orjson.dumps(values), GenerateParameters)


def _number(value: Any) -> Any:
    """'0.1' -> 0.1 and '16' -> 16: request parameters of older clients are strings."""
    if not isinstance(value, str):
        return value
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            continue
    return value
