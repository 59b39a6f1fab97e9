"""A tunnel through a SOCKS5 proxy (RFC 1928) to an upstream: method negotiation,
username/password authentication (RFC 1929) when the proxy URL carries credentials, and
CONNECT. What the tunnel carries (plain HTTP, or TLS with the upstream) is the caller's:
`podserve.gateway.upstream_http`, through `upstream_proxy.open_tunnel`.

`socks5://` resolves the upstream's name here and sends the proxy an address;
`socks5h://` sends the name, for the proxy to resolve (curl's reading of the two schemes).
An IP literal is sent as an address either way.

Every message the proxy sends has a size known before it is read (a CONNECT reply's
address is at most a length byte and 255 bytes of name), so nothing past the largest is
buffered; the caller bounds the whole handshake with its connect timeout.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import struct

from podserve.config.egress_proxy import Proxy
from podserve.gateway.upstream_conn import UpstreamError

_VERSION = 5  # RFC 1928 §3
_NO_AUTH, _USER_PASSWORD, _NO_ACCEPTABLE = 0x00, 0x02, 0xFF  # RFC 1928 §3
_AUTH_VERSION = 1  # RFC 1929 §2: the subnegotiation's own version
_CONNECT = 1  # RFC 1928 §4: CMD
_IPV4, _DOMAIN, _IPV6 = 1, 3, 4  # RFC 1928 §5: ATYP
# The largest message a proxy sends: a CONNECT reply naming a domain (RFC 1928 §6).
_REPLY_MAX = 4 + 1 + 255 + 2
# RFC 1928 §6: REP, 0x00 being success; 0x09 to 0xFF are unassigned.
_REPLIES = {
    1: "general SOCKS server failure",
    2: "connection not allowed by ruleset",
    3: "network unreachable",
    4: "host unreachable",
    5: "connection refused",
    6: "TTL expired",
    7: "command not supported",
    8: "address type not supported",
}


class SocksError(UpstreamError):
    """The proxy, not the upstream, refused or broke the handshake."""


class _Handshake(asyncio.Protocol):
    """The proxy's side of the handshake, read in messages of known sizes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, label: str) -> None:
        self._loop = loop
        self._label = label
        self._buffer = bytearray()
        self._waiter: asyncio.Future[None] | None = None
        self._error: SocksError | None = None
        self._overflow = False
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self._overflow:
            return
        self._buffer += data
        # A proxy speaks only in answer, one message at a time: more than the largest
        # message unread is not SOCKS5, and is not kept.
        if len(self._buffer) > _REPLY_MAX:
            self._overflow = True
            self._buffer.clear()
            self._error = SocksError(f"{self._label} sent more than a SOCKS5 reply")
            assert self.transport is not None
            self.transport.close()
        self._wake()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._error is None:
            reason = f": {exc}" if exc else ""
            self._error = SocksError(
                f"{self._label} closed the connection during the SOCKS5 handshake{reason}"
            )
        self._wake()

    def _wake(self) -> None:
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    async def read(self, size: int) -> bytes:
        """Exactly `size` bytes (at most `_REPLY_MAX`), once the proxy has sent them."""
        while len(self._buffer) < size:
            if self._error is not None:
                raise self._error
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    @property
    def leftover(self) -> int:
        return len(self._buffer)


async def _address(proxy: Proxy, host: str, port: int) -> bytes:
    """RFC 1928 §5's ATYP and DST.ADDR for the request."""
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is None and proxy.socks == "socks5":  # resolved here: the proxy gets an address
        loop = asyncio.get_running_loop()
        # The system's first answer (its RFC 6724 order), as curl takes it: a SOCKS5
        # request carries one address, so there is no falling back to the next.
        try:
            found = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise UpstreamError(f"cannot resolve {host} for {proxy.label}: {exc}") from exc
        ip = ipaddress.ip_address(str(found[0][4][0]).split("%", 1)[0])
    if ip is not None:
        return bytes([_IPV4 if ip.version == 4 else _IPV6]) + ip.packed
    try:
        name = host.encode("idna")
    except UnicodeError as exc:
        raise UpstreamError(f"{host!r} is not a host name: {exc}") from None
    if not 1 <= len(name) <= 255:  # one length byte
        raise UpstreamError(f"host name {host[:64]!r}... is too long for SOCKS5")
    return bytes([_DOMAIN, len(name)]) + name


async def _negotiate(proxy: Proxy, transport: asyncio.Transport, reply: _Handshake) -> None:
    """RFC 1928 §3: offer no authentication, and username/password (RFC 1929) when the
    URL has credentials; the proxy picks one or refuses them all."""
    methods = bytes([_NO_AUTH] if proxy.credentials is None else [_NO_AUTH, _USER_PASSWORD])
    transport.write(bytes([_VERSION, len(methods)]) + methods)
    version, method = await reply.read(2)
    if version != _VERSION:
        raise SocksError(f"{proxy.label} did not answer as a SOCKS5 proxy")
    if method == _NO_ACCEPTABLE:
        offered = (
            "no authentication; it may need credentials"
            if proxy.credentials is None
            else "no authentication, username/password"
        )
        raise SocksError(
            f"{proxy.label} accepts none of the offered authentication methods ({offered})"
        )
    if method == _NO_AUTH:
        return
    if method != _USER_PASSWORD or proxy.credentials is None:
        raise SocksError(f"{proxy.label} chose method {method:#04x}, which was not offered")
    user, password = proxy.credentials  # lengths checked at start (config.egress_proxy)
    transport.write(bytes([_AUTH_VERSION, len(user)]) + user + bytes([len(password)]) + password)
    version, status = await reply.read(2)
    if version != _AUTH_VERSION:
        raise SocksError(f"{proxy.label} answered the credentials with version {version}")
    if status != 0:  # RFC 1929 §2: anything else is a failure, and the proxy closes
        raise SocksError(f"{proxy.label} refused the credentials")


async def _connect(
    proxy: Proxy, transport: asyncio.Transport, reply: _Handshake, host: str, port: int
) -> None:
    """RFC 1928 §4 and §6: CONNECT to host:port, and the proxy's reply, whose bound
    address (where the proxy connected from) is read and dropped."""
    address = await _address(proxy, host, port)
    transport.write(bytes([_VERSION, _CONNECT, 0]) + address + struct.pack("!H", port))
    version, code, _, kind = await reply.read(4)
    if version != _VERSION:
        raise SocksError(f"{proxy.label} answered CONNECT with version {version}")
    if code != 0:
        reason = _REPLIES.get(code, "unassigned reply code")
        raise SocksError(
            f"{proxy.label} could not connect to {host}:{port}: {reason} ({code:#04x})"
        )
    if kind == _IPV4:
        await reply.read(4 + 2)
    elif kind == _IPV6:
        await reply.read(16 + 2)
    elif kind == _DOMAIN:
        (length,) = await reply.read(1)
        await reply.read(length + 2)
    else:
        raise SocksError(f"{proxy.label} answered CONNECT with address type {kind}")
    # The upstream speaks only once spoken to (HTTP, TLS): a byte already here is the
    # proxy's garbage, which would otherwise be taken for the upstream's.
    if reply.leftover:
        raise SocksError(f"{proxy.label} sent bytes after its CONNECT reply")


async def open_socks5(
    loop: asyncio.AbstractEventLoop, proxy: Proxy, host: str, port: int
) -> asyncio.BaseTransport:
    """A connection through the SOCKS5 `proxy` to host:port, carrying nothing yet. The
    caller bounds it with its connect timeout and gives the transport a protocol."""
    transport, reply = await loop.create_connection(
        lambda: _Handshake(loop, proxy.label), proxy.host, proxy.port
    )
    try:
        await _negotiate(proxy, transport, reply)
        await _connect(proxy, transport, reply, host, port)
    except BaseException:
        transport.close()
        raise
    return transport
