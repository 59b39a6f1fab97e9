"""The gateway's HTTP server protocol: the pod's (`httpedge.limits`: connection bounds,
one write per response), with refusals in OpenAI's error shape."""

from __future__ import annotations

import asyncio

from podserve.config.gateway_config import GatewayConfig
from podserve.gateway.wire import ErrorType, error_body
from podserve.httpedge.limits import HttpLimits, bounded_protocol

# The protocol's refusals, in OpenAI's shape; its own code names each one.
_UNAVAILABLE = {"too_many_connections"}


def _refusal(status: int, code: str, message: str) -> bytes:
    kind = ErrorType.UNAVAILABLE if code in _UNAVAILABLE else ErrorType.INVALID
    return error_body(message, kind, code)


def gateway_protocol(config: GatewayConfig) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol bounded by the config (`uvicorn.Config(http=...)`):
    header and body deadlines, header size and connection caps."""
    limits = HttpLimits(
        max_header_bytes=config.max_header_bytes,
        header_timeout_s=config.header_timeout_s,
        max_connections=config.max_connections,
        body_timeout_s=config.body_timeout_s,
        # Bodies are parsed (OpenAI routes) or forwarded without their Content-Encoding
        # (OIP), so an encoded one is refused, 415, naming the coding.
        refuse_content_encoding=True,
    )
    # Every gateway response carries its overhead (docs/gateway.md); a refusal of the
    # connection or its HTTP is all overhead, and none of it is measured, so it says 0.
    return bounded_protocol(limits, _refusal, b"x-podserve-gateway-overhead-ms: 0.000\r\n")
