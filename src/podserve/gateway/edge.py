"""The gateway's HTTP server protocol: uvicorn's httptools protocol over a transport that
sends a response's head and body in one write (`core.coalesce`)."""

from __future__ import annotations

import asyncio
from typing import cast

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from podserve.core.coalesce import CoalescingTransport


class GatewayHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol over a CoalescingTransport (`uvicorn.Config(http=...)`)."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        wrapped = CoalescingTransport(transport, self.loop)
        super().connection_made(cast(asyncio.Transport, wrapped))
