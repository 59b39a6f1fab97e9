"""What the gRPC servicer reads from grpc.aio's `ServicerContext`: invocation metadata,
the client's deadline and the caller's credentials, turned into the data plane's
`CallContext`."""

from __future__ import annotations

from typing import Any, TypeAlias

from podserve.admission.reservations import Reservation
from podserve.dataplane import CallContext
from podserve.dataplane.model_control import bearer_token

# grpc ships no types: grpc.aio.ServicerContext is Any to mypy.
Context: TypeAlias = Any


def call_context(
    context: Context,
    endpoint: str,
    request_id: str | None,
    reservation: Reservation | None = None,
) -> CallContext:
    """The data plane's view of an inference call. The time the client's deadline leaves
    (`time_remaining()`) goes to the data plane in `CallContext.client_timeout_s`, and the
    data plane computes the request's deadline from it together with Triton's `timeout`
    parameter and the model's and server's defaults, exactly as for REST; a request whose
    deadline passes while queued is never computed."""
    remaining_s = context.time_remaining()  # None without a client deadline
    return CallContext(
        endpoint=endpoint,
        request_id=request_id,
        client_timeout_s=None if remaining_s is None else float(remaining_s),
        reservation=reservation,
    )


def admin_call(context: Context) -> CallContext:
    """A repository call with its credentials (`authorization: Bearer <token>` metadata)."""
    return CallContext(
        endpoint="grpc.repository",
        admin_token=bearer_token(metadata_value(context, "authorization")),
    )


def metadata_value(context: Context, key: str) -> str | None:
    for item_key, value in context.invocation_metadata() or ():
        if item_key == key:
            return str(value)
    return None
