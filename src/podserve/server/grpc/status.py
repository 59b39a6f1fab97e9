"""The gRPC edge's one error mapping: `core.errors` exception -> gRPC status, and the
`code` label a finished call is counted under.

The data plane raises only `podserve.core.errors`; `status_for` maps each to a gRPC
status, once, for every method. Anything else is a bug: it is logged and the client
gets INTERNAL with a generic message (never a traceback).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import NoReturn

import grpc

from podserve.admission import retry_after_header
from podserve.core.errors import (
    AlreadyExists,
    Cancelled,
    DeadlineExceeded,
    InvalidInput,
    ModelNotFound,
    NotFound,
    PayloadTooLarge,
    PodserveError,
    Unauthenticated,
    Unavailable,
    UnprocessableInput,
)
from podserve.server.cut import CUT_MESSAGE
from podserve.server.errors import status_of
from podserve.server.grpc.context import Context

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GrpcStatus:
    code: grpc.StatusCode
    details: str
    trailing_metadata: tuple[tuple[str, str], ...] = ()


# Ordered: the first matching class wins, so subclasses (ModelNotReady, Draining under
# Unavailable) are covered by their base. The choices and reasons are in docs of
# `status_for`.
_STATUS_BY_ERROR: tuple[tuple[type[PodserveError], grpc.StatusCode], ...] = (
    (InvalidInput, grpc.StatusCode.INVALID_ARGUMENT),
    (UnprocessableInput, grpc.StatusCode.INVALID_ARGUMENT),
    (PayloadTooLarge, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (ModelNotFound, grpc.StatusCode.NOT_FOUND),
    (Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (Unavailable, grpc.StatusCode.UNAVAILABLE),
    (DeadlineExceeded, grpc.StatusCode.DEADLINE_EXCEEDED),
    (Cancelled, grpc.StatusCode.CANCELLED),
)


def status_for(error: BaseException, request_id: str | None = None) -> GrpcStatus:
    """The gRPC status a client gets for `error`.

    - InvalidInput, UnprocessableInput -> INVALID_ARGUMENT: the request itself is wrong
      and retrying it unchanged cannot help (gRPC has no separate 422).
    - PayloadTooLarge -> RESOURCE_EXHAUSTED: the code gRPC itself returns when a message
      exceeds the receive limit, so clients see one code for "too big" either way.
    - ModelNotFound, NotFound (a shared-memory region) -> NOT_FOUND; AlreadyExists ->
      ALREADY_EXISTS (Triton's codes, src/grpc/grpc_utils.cc).
    - Unavailable (over capacity, ModelNotReady, Draining) -> UNAVAILABLE, the code gRPC
      clients treat as retryable (Triton also answers a full queue with UNAVAILABLE),
      with trailing metadata `retry-after` in whole seconds.
    - DeadlineExceeded -> DEADLINE_EXCEEDED; Cancelled -> CANCELLED.
    - InferenceFailed, ModelLoadFailed, any other PodserveError -> INTERNAL with its message.
    - Anything else -> INTERNAL with a generic message; the caller logs the exception.
    Every error carries `x-request-id` in trailing metadata when the request had one.
    The details are `bounded_details` of the error's message.
    """
    metadata: tuple[tuple[str, str], ...] = (("x-request-id", request_id),) if request_id else ()
    if not isinstance(error, PodserveError):
        return GrpcStatus(grpc.StatusCode.INTERNAL, "internal server error", metadata)
    code = grpc.StatusCode.INTERNAL
    for error_type, mapped in _STATUS_BY_ERROR:
        if isinstance(error, error_type):
            code = mapped
            break
    if isinstance(error, Unavailable):
        metadata += (("retry-after", retry_after_header(error.retry_after_s)),)
    return GrpcStatus(code, bounded_details(error.message), metadata)


# Status details travel in the `grpc-message` trailer, percent-encoded: each byte outside
# printable ASCII (and `%`) becomes three ("%XX", doc/PROTOCOL-HTTP2.md in grpc/grpc).
# A client refuses trailers over its hard metadata limit, 16 KiB by default
# (GRPC_ARG_ABSOLUTE_MAX_METADATA_SIZE, include/grpc/impl/channel_arg_names.h), and
# randomly some over the soft 8 KiB one: a message naming a 1 MB model name reached the
# client as RESOURCE_EXHAUSTED "Stream removed (received metadata size exceeds hard
# limit)" instead of NOT_FOUND. Client strings quoted in messages are cut, and the
# whole kept under `MAX_DETAILS_BYTES` encoded, far from both limits.
MAX_DETAILS_BYTES = 2048
_KEPT_CHARS = 200  # of one long client string (a run of non-space characters)
_LONG_RUN = re.compile(rf"\S{{{_KEPT_CHARS + 1},}}")


def bounded_details(message: str) -> str:
    """`message` with each run of more than 200 non-space characters (a client's model
    name, input name, datatype...) cut to its first 200, an ellipsis and its length,
    and the whole cut to `MAX_DETAILS_BYTES` as the `grpc-message` trailer encodes it."""
    message = _LONG_RUN.sub(_shortened, message)
    budget = MAX_DETAILS_BYTES - 64  # room for the note of what was cut
    for index, char in enumerate(message):  # stops within ~2,000 characters
        budget -= 1 if " " <= char <= "~" and char != "%" else 3 * len(char.encode())
        if budget < 0:
            return f"{message[:index]}... ({len(message) - index} more characters)"
    return message


def _shortened(run: re.Match[str]) -> str:
    text = run[0]
    return f"{text[:_KEPT_CHARS]}... ({len(text)} characters)"


@contextlib.asynccontextmanager
async def status_on_error(
    context: Context, method: str, request_id: str | None = None
) -> AsyncIterator[None]:
    """End the RPC with `status_for(error)` when the body raises."""
    try:
        yield
    except grpc.aio.AbortError:
        raise  # already a status; not ours to translate
    except Exception as exc:  # every error must become a status
        await abort_with_status(context, exc, method, request_id)


async def abort_with_status(
    context: Context, error: Exception, method: str, request_id: str | None
) -> NoReturn:
    """End the RPC with `status_for(error)`; call it from the `except` that caught it."""
    if not isinstance(error, PodserveError):
        logger.exception("unexpected error in gRPC %s (request id %s)", method, request_id)
    status = status_for(error, request_id)
    await context.abort(status.code, status.details, status.trailing_metadata)
    # grpc.aio's abort always raises AbortError (`_ServicerContext.abort`,
    # src/python/grpcio/grpc/_cython/_cygrpc/aio/server.pyx.pxi); this is never reached.
    raise AssertionError("grpc.aio's context.abort returned")


def request_code(error: BaseException | None) -> str:
    """The `code` label of `podserve_requests_total`: the HTTP status the same outcome
    gets on the REST edge, so one query covers both edges."""
    if error is None:
        return "200"
    if isinstance(error, asyncio.CancelledError):
        # The drain timeout's cut (server/grpc/cut.py cancels with CUT_MESSAGE) ends the
        # call UNAVAILABLE and counts 503, as a cut REST request does; any other
        # cancellation is the client leaving.
        return "503" if error.args and error.args[0] == CUT_MESSAGE else "499"
    return str(status_of(error)) if isinstance(error, PodserveError) else "500"
