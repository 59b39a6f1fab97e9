"""The CONNECT tunnel through an HTTP egress proxy (RFC 9110 §9.3.6) for https upstreams,
or a SOCKS5 tunnel (`podserve.gateway.socks5`) for either scheme; which proxy, if any, an
origin takes is `podserve.config.egress_proxy`."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Callable
from typing import TypeVar

from podserve.config.egress_proxy import Proxy
from podserve.gateway.socks5 import open_socks5
from podserve.gateway.upstream_conn import UpstreamError

_CONNECT_REPLY_MAX = 16 * 1024


class _TunnelReply(asyncio.Protocol):
    """Reads the proxy's answer to CONNECT: its status line and headers, nothing more
    (the upstream speaks only after the TLS handshake, so no byte follows them)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.head = loop.create_future()
        self._buffer = b""
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.head.done():
            return
        self._buffer += data
        end = self._buffer.find(b"\r\n\r\n")
        if end >= 0:
            self.head.set_result(self._buffer[:end])
        elif len(self._buffer) > _CONNECT_REPLY_MAX:
            self.head.set_exception(UpstreamError("proxy's CONNECT reply is too long"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.head.done():
            self.head.set_exception(UpstreamError("proxy closed the connection during CONNECT"))


_P = TypeVar("_P", bound=asyncio.BaseProtocol)


async def connect_to_proxy(
    loop: asyncio.AbstractEventLoop,
    factory: Callable[[], _P],
    proxy: Proxy,
    context: ssl.SSLContext,
) -> tuple[asyncio.Transport, _P]:
    """A connection to the proxy itself: TLS verified with `context` for an https:// one.
    A failed handshake names the proxy, so it is not taken for the upstream's."""
    try:
        return await loop.create_connection(
            factory,
            proxy.host,
            proxy.port,
            ssl=context if proxy.tls else None,
            server_hostname=proxy.host if proxy.tls else None,
        )
    except ssl.SSLError as exc:
        raise UpstreamError(f"TLS with {proxy.label} failed: {exc}") from exc


async def open_tunnel(
    loop: asyncio.AbstractEventLoop,
    proxy: Proxy,
    host: str,
    port: int,
    context: ssl.SSLContext,
) -> asyncio.BaseTransport:
    """A connection through `proxy` to host:port (CONNECT, or SOCKS5's), not yet TLS with
    the upstream; TLS with the proxy when it is an https:// one, verified with `context`.
    The caller bounds it with its connect timeout and closes nothing on success."""
    if proxy.socks is not None:
        return await open_socks5(loop, proxy, host, port)
    transport, reply = await connect_to_proxy(loop, lambda: _TunnelReply(loop), proxy, context)
    try:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        transport.write(
            b"CONNECT %s HTTP/1.1\r\nhost: %s\r\n%s\r\n"
            % (authority.encode("idna"), authority.encode("idna"), proxy.header_lines())
        )
        head = await reply.head
        status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
        fields = status_line.split(" ", 2)
        if len(fields) < 2 or not fields[0].startswith("HTTP/1.") or not fields[1].isdigit():
            raise UpstreamError(f"proxy answered CONNECT with {status_line!r}")
        if not 200 <= int(fields[1]) < 300:
            raise UpstreamError(f"{proxy.label} refused CONNECT to {authority}: {status_line}")
    except BaseException:
        transport.close()
        raise
    return transport
