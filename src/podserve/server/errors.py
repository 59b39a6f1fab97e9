"""The one place domain errors become HTTP statuses and JSON bodies."""

from __future__ import annotations

from podserve.admission import retry_after_header
from podserve.core.errors import (
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    Draining,
    InferenceFailed,
    InvalidInput,
    ModelLoadFailed,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    PodserveError,
    Unauthenticated,
    Unavailable,
    UnprocessableInput,
)
from podserve.server.http import Response, json_response

# (kind, HTTP status, the short code OpenAI-shaped bodies carry as `code`). OpenAI's
# error object types `code` as a string or null, never a number (the status is the
# response's own); the gateway's codes are strings too (gateway/errors.py reasons).
_KINDS: tuple[tuple[type[PodserveError], int, str], ...] = (
    (InvalidInput, 400, "invalid_input"),
    (ModelNotFound, 404, "model_not_found"),
    (Unauthenticated, 401, "unauthenticated"),
    (NotFound, 404, "not_found"),
    (AlreadyExists, 400, "already_exists"),  # Triton's HTTP server: ALREADY_EXISTS is a 400
    (PayloadTooLarge, 413, "payload_too_large"),
    (UnprocessableInput, 422, "unprocessable_input"),
    (Unavailable, 503, "unavailable"),  # its own `reason` when it has one (code_of)
    (DeadlineExceeded, 504, "deadline_exceeded"),
    (Cancelled, 499, "cancelled"),
    (ModelLoadFailed, 500, "model_load_failed"),
    (InferenceFailed, 500, "inference_failed"),
)


def _kind_of(error: PodserveError) -> tuple[int, str]:
    for kind, status, code in _KINDS:
        if isinstance(error, kind):
            return status, code
    return 500, "internal_error"


def status_of(error: PodserveError) -> int:
    return _kind_of(error)[0]


def code_of(error: PodserveError) -> str:
    """The error's short code: a 503's reason (`queue_full`, `draining`, ..., the
    `podserve_rejected_requests_total` label), else its kind's."""
    if isinstance(error, Unavailable):
        return error.reason
    return _kind_of(error)[1]


def error_response(error: PodserveError) -> Response:
    """OIP error shape: {"error": "<message>"}."""
    return json_response(status_of(error), {"error": error.message}, _headers_for(error))


def openai_error(error: PodserveError) -> dict[str, object]:
    """OpenAI's error object: {"error": {"message", "type", "param", "code"}}."""
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "invalid_request_error",
        422: "invalid_request_error",
        503: "service_unavailable",
        504: "timeout",
    }.get(status_of(error), "server_error")
    return openai_error_body(error.message, kind, code_of(error))


def openai_error_body(message: str, kind: str, code: str | None) -> dict[str, object]:
    """OpenAI's error object from its parts, for errors that are not a PodserveError (an
    unhandled exception, the route table's 405)."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def openai_error_response(error: PodserveError) -> Response:
    """OpenAI's error object, for /v1/* routes."""
    return json_response(status_of(error), openai_error(error), _headers_for(error))


def _headers_for(error: PodserveError) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = []
    if isinstance(error, Unavailable):
        headers.append((b"retry-after", retry_after_header(error.retry_after_s).encode()))
    if isinstance(error, Draining):
        # Make the client's next request open a new connection, which the Service routes
        # to a pod that is not draining.
        headers.append((b"connection", b"close"))
    return headers
