"""One stream entry through the data plane: decode its body, call `DataPlane.infer` (the
same admission, dynamic batching and runtimes as the HTTP edge), encode the result.

Entries processed concurrently reach a model's dynamic batcher together, so entries are
batched with each other exactly as concurrent HTTP requests are.
"""

from __future__ import annotations

import dataclasses
import logging

import orjson

from podserve.consume.contract import Api, Result, StreamEntry
from podserve.consume.generation import completion
from podserve.core.errors import (
    Cancelled,
    DeadlineExceeded,
    InferenceFailed,
    InvalidInput,
    ModelLoadFailed,
    ModelNotFound,
    PayloadTooLarge,
    PodserveError,
    Unavailable,
    UnprocessableInput,
)
from podserve.dataplane import CallContext, DataPlaneAPI
from podserve.protocol.openai.embeddings import (
    decode_embedding_request,
    encode_embedding_response,
)
from podserve.protocol.v2 import decode_infer_request, encode_infer_response

log = logging.getLogger("podserve.consume")

# The statuses the HTTP edge answers for each domain error (server/errors.py `_STATUS`;
# consume sits beside server in the layering and may not import it).
_STATUS: tuple[tuple[type[PodserveError], int], ...] = (
    (InvalidInput, 400),
    (ModelNotFound, 404),
    (PayloadTooLarge, 413),
    (UnprocessableInput, 422),
    (Unavailable, 503),
    (DeadlineExceeded, 504),
    (Cancelled, 499),
    (ModelLoadFailed, 500),
    (InferenceFailed, 500),
)

# Worth another delivery: the server was busy or draining (503), or the model failed in
# a way that may pass (500). A 4xx is the request's own fault and is answered at once.
RETRYABLE_STATUSES = frozenset({500, 503})


def status_of(error: PodserveError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


def error_result(request_id: str, status: int, message: str) -> Result:
    return Result(request_id, status, orjson.dumps({"error": message}))


async def process(dataplane: DataPlaneAPI, entry: StreamEntry) -> Result:
    """The entry's result; never raises (but lets task cancellation through)."""
    if entry.problem is not None:
        return error_result(entry.request_id, 400, entry.problem)
    call = CallContext(endpoint="consume", request_id=entry.request_id)
    try:
        if entry.api is Api.OPENAI_EMBEDDINGS:
            body = await _embeddings(dataplane, entry, call)
        elif entry.api in (Api.OPENAI_COMPLETIONS, Api.OPENAI_CHAT):
            chat = entry.api is Api.OPENAI_CHAT
            body = await completion(dataplane, entry.model, entry.body, call, chat=chat)
        else:
            body = await _v2(dataplane, entry, call)
    except PodserveError as exc:
        return error_result(entry.request_id, status_of(exc), exc.message)
    except Exception as exc:  # a runtime bug must fail one entry, never the consumer
        log.exception("entry failed", extra={"request_id": entry.request_id})
        return error_result(entry.request_id, 500, f"internal error: {type(exc).__name__}")
    return Result(entry.request_id, 200, body)


async def _v2(dataplane: DataPlaneAPI, entry: StreamEntry, call: CallContext) -> bytes:
    dataplane.check_model(entry.model, entry.version)  # 404 before decoding, as over HTTP
    request = decode_infer_request(
        entry.body, model_name=entry.model, model_version=entry.version, header_length=None
    )
    response = await dataplane.infer(request, call)
    payload, _ = encode_infer_response(response, binary_outputs=False)  # JSON only
    return payload


async def _embeddings(dataplane: DataPlaneAPI, entry: StreamEntry, call: CallContext) -> bytes:
    parsed, request = decode_embedding_request(entry.body)
    # The entry's `model` field routes it; the body's `model` is echoed as OpenAI does.
    request = dataclasses.replace(request, model_name=entry.model, model_version=entry.version)
    dataplane.check_model(entry.model, entry.version)
    response = await dataplane.infer(request, call)
    outputs = {t.name: t.data for t in response.outputs}
    if "embedding" not in outputs or "tokens" not in outputs:
        raise InvalidInput(
            f"model {entry.model!r} is not an embedding model (it returns {sorted(outputs)}, "
            "not 'embedding' and 'tokens')"
        )
    return encode_embedding_response(parsed, outputs["embedding"], outputs["tokens"])
