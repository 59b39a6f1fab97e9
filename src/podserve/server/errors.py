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

_STATUS: tuple[tuple[type[PodserveError], int], ...] = (
    (InvalidInput, 400),
    (ModelNotFound, 404),
    (Unauthenticated, 401),
    (NotFound, 404),
    (AlreadyExists, 400),  # Triton's HTTP server: ALREADY_EXISTS is a 400
    (PayloadTooLarge, 413),
    (UnprocessableInput, 422),
    (Unavailable, 503),
    (DeadlineExceeded, 504),
    (Cancelled, 499),
    (ModelLoadFailed, 500),
    (InferenceFailed, 500),
)


def status_of(error: PodserveError) -> int:
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 500


def error_response(error: PodserveError) -> Response:
    """OIP error shape: {"error": "<message>"}."""
    return json_response(status_of(error), {"error": error.message}, _headers_for(error))


def openai_error_response(error: PodserveError) -> Response:
    """OpenAI's error object, for /v1/* routes."""
    status = status_of(error)
    kind = {
        400: "invalid_request_error",
        401: "authentication_error",
        404: "not_found_error",
        413: "invalid_request_error",
        422: "invalid_request_error",
        503: "service_unavailable",
        504: "timeout",
    }.get(status, "server_error")
    body = {"error": {"message": error.message, "type": kind, "param": None, "code": status}}
    return json_response(status, body, _headers_for(error))


def _headers_for(error: PodserveError) -> list[tuple[bytes, bytes]]:
    headers: list[tuple[bytes, bytes]] = []
    if isinstance(error, Unavailable):
        headers.append((b"retry-after", retry_after_header(error.retry_after_s).encode()))
    if isinstance(error, Draining):
        # Make the client's next request open a new connection, which the Service routes
        # to a pod that is not draining.
        headers.append((b"connection", b"close"))
    return headers
