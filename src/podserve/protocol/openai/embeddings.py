"""`POST /v1/embeddings`: the request schema, its mapping to a BYTES tensor of texts, and
the response (floats, or base64 of little-endian float32 — the openai SDK asks for base64
by default and decodes it itself)."""

from __future__ import annotations

import base64
import dataclasses
from typing import Annotated, Any, Literal

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, ValidatorFunctionWrapHandler, WrapValidator

from podserve.core.errors import InvalidInput
from podserve.core.tensors import Datatype, InferRequest, Tensor
from podserve.protocol.json_body import FailFastList, parse_body, token_ids

MAX_INPUTS = 2048


def _bounded_texts(value: object, validate: ValidatorFunctionWrapHandler) -> object:
    """A list of inputs is refused on its first item and its length before any item is
    validated (protocol/json_body.py): a million floats cost 16 s of event loop when
    pydantic checked each against four list types. InvalidInput passes through pydantic
    unchanged."""
    if isinstance(value, list):
        if not value:
            raise InvalidInput("'input' must not be empty")
        if token_ids(value):
            raise InvalidInput(
                "'input' as token ids is not supported; send the text (a string or a list of "
                "strings)"
            )
        if len(value) > MAX_INPUTS:
            raise InvalidInput(f"'input' has {len(value)} items; at most {MAX_INPUTS}")
    return validate(value)


class EmbeddingRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, strict=True)

    model: str
    input: Annotated[str | FailFastList[str], WrapValidator(_bounded_texts)]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None

    def texts(self) -> list[str]:
        return [self.input] if isinstance(self.input, str) else list(self.input)


def decode_embedding_request(body: bytes) -> tuple[EmbeddingRequest, InferRequest]:
    parsed = parse_body(body, EmbeddingRequest)
    texts = parsed.texts()
    if parsed.dimensions is not None and parsed.dimensions < 1:
        raise InvalidInput("'dimensions' must be at least 1")
    if not all(texts):  # OpenAI refuses an empty string too: it has nothing to embed
        raise InvalidInput(f"'input' item {texts.index('')} is an empty string")
    array = np.array([t.encode("utf-8") for t in texts], dtype=object)
    request = InferRequest(model_name=parsed.model, inputs=(Tensor("text", Datatype.BYTES, array),))
    return parsed, request


def split_embedding_request(request: InferRequest, rows: int) -> list[InferRequest]:
    """The request as requests of at most `rows` texts each, in order (0: one request).
    OpenAI takes up to MAX_INPUTS texts in one request, a batching model at most its
    max_batch_size rows in one call."""
    (texts,) = request.inputs
    if rows < 1 or len(texts.data) <= rows:
        return [request]
    return [
        dataclasses.replace(
            request, inputs=(dataclasses.replace(texts, data=texts.data[start : start + rows]),)
        )
        for start in range(0, len(texts.data), rows)
    ]


def encode_embedding_response(
    request: EmbeddingRequest, embeddings: np.ndarray[Any, Any], tokens: np.ndarray[Any, Any]
) -> bytes:
    if request.dimensions is not None:
        if request.dimensions > embeddings.shape[1]:
            raise InvalidInput(
                f"'dimensions' {request.dimensions} exceeds the model's {embeddings.shape[1]}"
            )
        # Matryoshka-style truncation, renormalised, as OpenAI's text-embedding-3 does.
        embeddings = embeddings[:, : request.dimensions]
        norms = np.linalg.norm(embeddings, axis=1, keepdims=True)
        embeddings = embeddings / np.maximum(norms, 1e-12)
    data = []
    for index, row in enumerate(embeddings.astype(np.float32)):
        vector: Any = (
            base64.b64encode(row.astype("<f4").tobytes()).decode()
            if request.encoding_format == "base64"
            else row
        )
        data.append({"object": "embedding", "index": index, "embedding": vector})
    used = int(tokens.sum())
    return orjson.dumps(
        {
            "object": "list",
            "data": data,
            "model": request.model,
            "usage": {"prompt_tokens": used, "total_tokens": used},
        },
        option=orjson.OPT_SERIALIZE_NUMPY,
    )
