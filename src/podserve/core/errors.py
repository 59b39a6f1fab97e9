"""Domain errors. None of them knows about HTTP: the edge (server/) maps each kind to a
status code once. Each carries a message written for the user that names what is wrong
and, where there is one, the limit that was crossed."""

from __future__ import annotations


class PodserveError(Exception):
    """Base of every error podserve reports to a client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(PodserveError):
    """The request is malformed: bad JSON, shape, datatype or parameter (HTTP 400)."""


class UnprocessableInput(PodserveError):
    """Well-formed but semantically impossible input (HTTP 422)."""


class PayloadTooLarge(PodserveError):
    """The request body exceeds the configured byte limit (HTTP 413)."""


class ModelNotFound(PodserveError):
    """No model (or version) of that name is known to this server (HTTP 404)."""


class ModelUnloaded(ModelNotFound):
    """The model was unloaded on purpose (the repository API) and is not served until it
    is loaded again: not retryable, unlike a model that is still loading (HTTP 404)."""


class Unauthenticated(PodserveError):
    """The request needs credentials it did not carry, or carried wrong ones (HTTP 401,
    gRPC UNAUTHENTICATED)."""


class NotFound(PodserveError):
    """A named resource other than a model, such as a shared-memory region, is not
    registered (HTTP 404, gRPC NOT_FOUND)."""


class AlreadyExists(PodserveError):
    """A resource of that name is already registered (HTTP 400 and gRPC ALREADY_EXISTS,
    as Triton answers)."""


class Unavailable(PodserveError):
    """Capacity or state refuses the request now; retrying later may work (HTTP 503).

    `reason` is a short machine label (it becomes the `reason` label of
    `podserve_rejected_requests_total`); `retry_after_s` feeds the Retry-After header.
    """

    def __init__(self, message: str, *, reason: str, retry_after_s: float = 1.0) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_s = retry_after_s


class ModelNotReady(Unavailable):
    """The model is known but not loaded (loading, failed or unloaded)."""

    def __init__(self, message: str, *, retry_after_s: float = 1.0) -> None:
        super().__init__(message, reason="model_not_ready", retry_after_s=retry_after_s)


class Draining(Unavailable):
    """The server received SIGTERM and takes no new work."""

    def __init__(
        self,
        message: str = "server is draining after SIGTERM; retry on another replica",
        *,
        retry_after_s: float = 1.0,
    ) -> None:
        super().__init__(message, reason="draining", retry_after_s=retry_after_s)


class DeadlineExceeded(PodserveError):
    """The request's deadline passed before it could run; it was never computed (HTTP 504)."""


class Cancelled(PodserveError):
    """The client went away; the request was dropped (no response is sent)."""


class InferenceFailed(PodserveError):
    """The model raised while computing this request (HTTP 500)."""


class DeviceError(InferenceFailed):
    """The accelerator (or its runtime) failed; readiness reports it until a call succeeds."""


class ModelLoadFailed(PodserveError):
    """Loading a model failed; the message carries the underlying cause."""
