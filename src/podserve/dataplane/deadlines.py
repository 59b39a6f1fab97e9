"""A request's deadline, the same for every edge (pure: the time is an argument).

Sources, the first present wins, then the earlier of it and the transport's own:

1. the request parameter `timeout`, in **microseconds**, as Triton and its clients mean
   it: tritonclient's `infer(..., timeout=...)` documents "The timeout value for the
   request, in microseconds" and sends it as `parameters["timeout"]` (REST,
   tritonclient/http/_utils.py) or `parameters["timeout"].int64_param` (gRPC,
   tritonclient/grpc/_utils.py);
2. the `x-request-timeout-ms` header (REST), in milliseconds;
3. the model's `limits.default_timeout_s`, then the server's `default_timeout_s`.

A transport deadline (gRPC's, `client_timeout_s` seconds from now) always applies too:
past it, nobody is waiting for the answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from podserve.core.errors import InvalidInput

US_PER_S = 1_000_000


def deadline_s(
    *,
    now_s: float,
    parameters: Mapping[str, Any],
    timeout_ms: str | None,
    client_timeout_s: float | None,
    default_timeout_s: float | None,
) -> float | None:
    """The absolute deadline on the caller's clock, or None for none."""
    timeout_s: float | None
    raw = parameters.get("timeout")
    if raw is not None:
        timeout_s = positive_number(raw, "parameters.timeout (microseconds, as Triton)") / US_PER_S
    elif timeout_ms is not None:
        timeout_s = positive_number(timeout_ms, "x-request-timeout-ms header") / 1000
    else:
        timeout_s = default_timeout_s
    own = None if timeout_s is None else now_s + timeout_s
    if client_timeout_s is None:
        return own
    transport = now_s + max(0.0, client_timeout_s)
    return transport if own is None else min(own, transport)


def positive_number(raw: object, what: str) -> float:
    # bool is an int to Python, but `timeout: true` is a client's mistake
    if isinstance(raw, bool):
        raise InvalidInput(f"{what} must be a number, got {raw!r}")
    try:
        value = float(raw)  # type: ignore[arg-type]  # str, int or float: checked right here
    except (TypeError, ValueError):
        raise InvalidInput(f"{what} must be a number, got {raw!r}") from None
    if not value > 0 or value == float("inf"):
        raise InvalidInput(f"{what} must be a positive finite number, got {raw!r}")
    return value
