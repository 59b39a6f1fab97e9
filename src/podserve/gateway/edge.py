"""The gateway's HTTP server protocol: the pod's (`httpedge.limits`: connection bounds,
one write per response), with refusals in OpenAI's error shape."""

from __future__ import annotations

import asyncio

from podserve.config.gateway_config import GatewayConfig
from podserve.gateway.wire import ErrorType, error_body
from podserve.httpedge.limits import HttpLimits, bounded_protocol

_KINDS = {
    408: (ErrorType.INVALID, "header_timeout"),
    431: (ErrorType.INVALID, "headers_too_large"),
    503: (ErrorType.UNAVAILABLE, "too_many_connections"),
}


def _refusal(status: int, message: str) -> bytes:
    kind, code = _KINDS.get(status, (ErrorType.INVALID, "bad_request"))
    return error_body(message, kind, code)


def gateway_protocol(config: GatewayConfig) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol bounded by the config (`uvicorn.Config(http=...)`)."""
    limits = HttpLimits(
        max_header_bytes=config.max_header_bytes,
        header_timeout_s=config.header_timeout_s,
        max_connections=config.max_connections,
    )
    return bounded_protocol(limits, _refusal)
