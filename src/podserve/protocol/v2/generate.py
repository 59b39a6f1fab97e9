"""Triton's generate extension (`POST /v2/models/{m}/generate` and `/generate_stream`):
the request schema and the JSON and server-sent-event bodies of its responses.

A request is `{"text_input": ..., "parameters": {...}}`; a response is
`{"model_name", "model_version", "text_output", "finish_reason"}`, one for /generate,
one per token for /generate_stream (`text_output` then holds the new text). Parameters
podserve does not know (other backends' knobs such as `end_id` or `bad_words`) are
ignored, so existing clients keep working; known ones are validated.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field

from podserve.protocol.json_body import parse_body
from podserve.protocol.sampling import SamplingFields


class GenerateParameters(SamplingFields):
    max_tokens: int = Field(16, ge=1)


class GenerateRequestParameters(GenerateParameters):
    # Triton's request timeout, in microseconds, as on /infer: kept as sent, so that the
    # data plane validates it with the same words for both (dataplane/deadlines.py).
    timeout: Any = None

    def request_parameters(self) -> dict[str, Any]:
        """The parameters that are the request's, not the sampler's."""
        return {} if self.timeout is None else {"timeout": self.timeout}


class GenerateRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)

    text_input: str
    parameters: GenerateRequestParameters = Field(default_factory=GenerateRequestParameters)


def decode_generate_request(body: bytes) -> GenerateRequest:
    return parse_body(body, GenerateRequest)


def _response(model: str, version: str, text: str, finish: str | None) -> dict[str, Any]:
    return {
        "model_name": model,
        "model_version": version,
        "text_output": text,
        "finish_reason": finish,
    }


def generate_body(model: str, version: str, text: str, finish: str) -> bytes:
    return orjson.dumps(_response(model, version, text, finish))


def generate_event(model: str, version: str, text: str, finish: str | None) -> bytes:
    return b"data: " + orjson.dumps(_response(model, version, text, finish)) + b"\n\n"


def generate_error_event(message: str) -> bytes:
    """An error after the stream started: the status line is gone, so it is an event."""
    return b"data: " + orjson.dumps({"error": message}) + b"\n\n"
