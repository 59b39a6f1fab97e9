"""The gateway's refusals, each carrying its status code; mapped to a response once, in
`app.py`."""

from __future__ import annotations

from podserve.gateway.wire import ErrorType


class GatewayError(Exception):
    status = 500
    kind = ErrorType.SERVER
    reason = "error"  # the podserve_gateway_rejections_total label

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.close_connection = False  # the request was not read whole
        # Time spent waiting on upstreams before this refusal: not the gateway's overhead.
        self.upstream_s = 0.0


class InvalidRequest(GatewayError):
    status = 400
    kind = ErrorType.INVALID
    reason = "invalid"


class BodyTooLarge(GatewayError):
    status = 413
    kind = ErrorType.INVALID
    reason = "too_large"


class Unauthorized(GatewayError):
    status = 401
    kind = ErrorType.AUTH
    reason = "auth"


class ModelForbidden(GatewayError):
    status = 403
    kind = ErrorType.PERMISSION
    reason = "model"


class UnknownModel(GatewayError):
    status = 404
    kind = ErrorType.INVALID
    reason = "unknown_model"


class OverLimit(GatewayError):
    status = 429
    kind = ErrorType.RATE

    def __init__(self, message: str, reason: str, retry_after_s: int) -> None:
        super().__init__(message, retry_after_s)
        self.reason = reason
        if reason == "budget":
            self.kind = ErrorType.BUDGET


class StoreDown(GatewayError):
    status = 503
    kind = ErrorType.UNAVAILABLE
    reason = "store"


class Overloaded(GatewayError):
    """Past the gateway's own bounds on requests or body bytes in flight (inflight.py)."""

    status = 503
    kind = ErrorType.UNAVAILABLE
    reason = "overloaded"


class NoUpstream(GatewayError):
    status = 503
    kind = ErrorType.UNAVAILABLE
    reason = "no_upstream"


class UpstreamFailed(GatewayError):
    """The upstream broke after answering (its body never arrived whole)."""

    status = 502
    kind = ErrorType.UNAVAILABLE
    reason = "upstream"


NAME_SHOWN_CHARS = 128


def shown(name: str) -> str:
    """A client-chosen name as an error message quotes it: cut short, so a 1 MB model
    name is not echoed into a 1 MB error body."""
    if len(name) <= NAME_SHOWN_CHARS:
        return name
    return f"{name[:NAME_SHOWN_CHARS]}... ({len(name)} characters)"
