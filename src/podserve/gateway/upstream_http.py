"""HTTP/1.1 to the upstreams: keep-alive connections on an asyncio Protocol, responses
parsed by httptools (llhttp, the parser Node.js and uvicorn use).

It replaced aiohttp's client, for CPU: the client's CPU per request is the proxy's
overhead, and `benchmarks/gateway_client.py` measured aiohttp's at 4.1 times this one's
for a W1-sized OIP exchange (116 against 28.6 µs on a busy machine) and 2.6 times for a
64-event stream; through the whole gateway, its CPU per OIP request fell by about 40%
(docs/gateway.md, "Its own upstream client"). What a proxy needs of a client, and all this one does:

- Keep-alive: one pool of idle connections per origin (scheme, host, port), newest first.
  One idle past `idle_s` (4 s) is closed, not reused: uvicorn, which podserve and vLLM
  serve on, closes idle connections after 5 s by default (`timeout_keep_alive`), and a
  request written into a connection the server is closing is lost.
- A connection goes back to the pool only when its response was read to the end and
  neither side said `Connection: close`. Anything else (a cancelled or timed-out request,
  a response not read whole, a parse error, an early close) closes it, which is also how
  a pod learns that a stream's client left.
- The request: head and body in one write; a body past 1 MiB in 64 KiB writes that wait
  on the transport's flow control and yield to the loop between them.
- The response: status and headers as soon as they are parsed, then the body as it
  arrives (chunked coding removed by the parser; a body without a length ends at the
  close). Reading pauses while 1 MiB is buffered and unread.
- Timeouts: `connect_timeout_s` (TCP and TLS); `read_timeout_s`, the longest wait for the
  next bytes of a response (its headers or a body chunk), as aiohttp's `sock_read`.
- https with the system's CA store (`ssl.create_default_context()`; OpenSSL honours
  `SSL_CERT_FILE` and `SSL_CERT_DIR`).
- An egress proxy from the environment (`https_proxy`, `http_proxy`, `no_proxy`, read by
  `config.egress_proxy`), chosen once per origin: CONNECT for https (`upstream_proxy`),
  the absolute URL as the request target for http; TLS to the proxy itself for an
  https:// one, verified with the same CA store. A SOCKS5 proxy (`socks5`) tunnels both
  schemes, and the tunnel is then the connection (TLS with the upstream inside it).
- No cookies, no redirects, and no Accept-Encoding, so bodies come uncompressed.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from urllib.parse import quote, urlsplit

from podserve.config.egress_proxy import NO_PROXIES, Proxy, ProxySettings
from podserve.gateway.upstream_conn import Connection, UpstreamError, UpstreamTimeout
from podserve.gateway.upstream_proxy import connect_to_proxy, open_tunnel

__all__ = [
    "Header",
    "ResponseTooLarge",
    "UpstreamClient",
    "UpstreamError",
    "UpstreamResponse",
    "UpstreamTimeout",
    "Url",
    "parse_url",
]
IDLE_S = 4.0
CLOSE_WAIT_S = 1.0  # the longest close() waits for connections to finish closing
_LARGE_BODY = 1 << 20
_USER_AGENT = b"podserve-gateway"
# Characters a request target keeps as they are: RFC 3986's unreserved, sub-delims, ":" and
# "@" (pchar), "/" and "?"; "%" so a path already escaped is not escaped twice.
_TARGET_SAFE = "/?:@!$&'()*+,;=%~-._"
Header = tuple[bytes, bytes]


class ResponseTooLarge(Exception):
    """A body past the reader's limit: refused instead of held whole in memory."""


@dataclass(frozen=True, slots=True)
class Url:
    """A parsed upstream URL, as a request needs it."""

    scheme: str
    host: str
    port: int
    target: bytes  # the request line's path and query, escaped
    host_header: bytes

    @property
    def origin(self) -> tuple[str, str, int]:
        return self.scheme, self.host, self.port


def parse_url(url: str) -> Url:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    default = 443 if parts.scheme == "https" else 80
    port = parts.port or default
    host = parts.hostname
    named = f"[{host}]" if ":" in host else host.encode("idna").decode("ascii")
    host_header = named if port == default else f"{named}:{port}"
    target = quote(parts.path or "/", safe=_TARGET_SAFE)
    if parts.query:
        target += "?" + quote(parts.query, safe=_TARGET_SAFE)
    return Url(parts.scheme, host, port, target.encode("ascii"), host_header.encode("ascii"))


def _header_lines(headers: Iterable[Header]) -> list[bytes]:
    lines = []
    for name, value in headers:
        if b"\r" in value or b"\n" in value or b"\r" in name or b"\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        lines.append(b"%s: %s\r\n" % (name, value))
    return lines


class UpstreamResponse:
    """A response whose headers are in; `read` or `chunks` its body, then `release`."""

    __slots__ = ("_client", "_conn", "content_length", "headers", "status")

    def __init__(self, conn: Connection, client: UpstreamClient) -> None:
        self._conn: Connection | None = conn
        self._client = client
        self.status = conn.status
        self.headers = conn.headers
        length = conn.headers.get("content-length")
        self.content_length = int(length) if length is not None and length.isdigit() else None

    def _live(self) -> Connection:
        if self._conn is None:
            raise RuntimeError("response already released")
        return self._conn

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's pieces as they arrive."""
        conn = self._live()
        while True:
            if conn.chunks:
                yield conn.take()
            elif conn.error is not None:
                raise conn.error
            elif conn.done:
                return
            else:
                await conn.wait(self._client.read_timeout_s)

    async def read(self, limit: int) -> bytes:
        """The whole body; ResponseTooLarge as soon as it passes `limit` bytes, by its
        Content-Length or as it arrives."""
        if self.content_length is not None and self.content_length > limit:
            raise ResponseTooLarge(f"{self.content_length} bytes")
        conn = self._live()
        pieces: list[bytes] = []
        size = 0
        while True:
            while conn.chunks:
                piece = conn.take()
                size += len(piece)
                if size > limit:
                    raise ResponseTooLarge(f"over {limit} bytes")
                pieces.append(piece)
            if conn.error is not None:
                raise conn.error
            if conn.done:
                return pieces[0] if len(pieces) == 1 else b"".join(pieces)
            await conn.wait(self._client.read_timeout_s)

    def release(self) -> None:
        """Done with the response: its connection back to the pool if the body was read
        to the end and both sides keep it alive, else closed."""
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if conn.done and conn.keep_alive and conn.error is None and not conn.lost and not conn.cut:
            self._client.reuse(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Done with the response, whatever was read: its connection is closed (a pod
        streaming to it sees its client leave)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class UpstreamClient:
    def __init__(
        self,
        connect_timeout_s: float,
        read_timeout_s: float | None,
        *,
        idle_s: float = IDLE_S,
        ssl_context: ssl.SSLContext | None = None,
        proxies: ProxySettings = NO_PROXIES,
    ) -> None:
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._idle_s = idle_s
        self._ssl = ssl_context
        self._idle: dict[tuple[str, str, int], collections.deque[Connection]] = {}
        self._open: set[Connection] = set()
        self._closed = False
        self.connections_made = 0
        self._proxies = proxies
        self._proxy_of: dict[tuple[str, str, int], Proxy | None] = {}

    async def request(
        self, method: bytes, url: Url, body: bytes, headers: Iterable[Header]
    ) -> UpstreamResponse:
        """Send the request; return once the response's headers are in."""
        lines = _header_lines(headers)
        if body or method == b"POST":
            lines.append(b"content-length: %d\r\n" % len(body))
        target = url.target
        proxy = None
        if self._proxies.any and url.scheme == "http":
            proxy = self._proxy(url)
            if proxy is not None and proxy.socks is not None:
                proxy = None  # a SOCKS tunnel: the upstream itself reads the request
            if proxy is not None:  # the proxy is told where: the absolute URL
                target = b"http://" + url.host_header + target
                lines.append(proxy.header_lines())
        head = b"".join(
            (method, b" ", target, b" HTTP/1.1\r\nhost: ", url.host_header,
             b"\r\nuser-agent: ", _USER_AGENT, b"\r\n", *lines, b"\r\n")
        )  # fmt: skip
        conn = self._pooled(url.origin) or await self._connect(url)
        conn.begin()
        conn.in_use = True
        try:
            if len(body) > _LARGE_BODY:
                await conn.write_large(head, body, self.read_timeout_s)
            else:
                assert conn.transport is not None
                conn.transport.writelines((head, body))
            while not conn.head_done:
                if conn.error is not None:
                    raise conn.error
                await conn.wait(self.read_timeout_s)
            if proxy is not None and conn.status == 407:
                # The proxy's, not the upstream's: the client is not asked for credentials.
                raise UpstreamError(f"{proxy.label} refused the request: 407 (credentials)")
        except BaseException:
            conn.close()
            raise
        return UpstreamResponse(conn, self)

    def _pooled(self, origin: tuple[str, str, int]) -> Connection | None:
        idle = self._idle.get(origin)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.lost:
                continue
            if now - conn.idle_since > self._idle_s:
                conn.close()  # and every one below it has been idle longer
                while idle:
                    idle.popleft().close()
                return None
            return conn
        return None

    def _proxy(self, url: Url) -> Proxy | None:
        try:
            return self._proxy_of[url.origin]
        except KeyError:
            found = self._proxy_of[url.origin] = self._proxies.for_origin(*url.origin)
            return found

    def _context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    async def _connect(self, url: Url) -> Connection:
        loop = asyncio.get_running_loop()
        context = self._context() if url.scheme == "https" else None
        proxy = self._proxy(url) if self._proxies.any else None
        via = "" if proxy is None else f" via {proxy.label}"
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if proxy is None:
                    _, conn = await loop.create_connection(
                        lambda: Connection(url.origin, loop, self._open),
                        url.host,
                        url.port,
                        ssl=context,
                        server_hostname=url.host if context is not None else None,
                    )
                elif context is None and proxy.socks is None:  # to an HTTP proxy itself
                    _, conn = await connect_to_proxy(
                        loop,
                        lambda: Connection(url.origin, loop, self._open),
                        proxy,
                        self._context(),
                    )
                else:
                    conn = await self._tunnel(loop, proxy, url, context)
        except TimeoutError as exc:
            raise UpstreamTimeout(
                f"no connection to {url.host}:{url.port}{via} in {self.connect_timeout_s:g} s"
            ) from exc
        self.connections_made += 1
        return conn

    async def _tunnel(
        self,
        loop: asyncio.AbstractEventLoop,
        proxy: Proxy,
        url: Url,
        context: ssl.SSLContext | None,
    ) -> Connection:
        """https through the proxy: CONNECT (or SOCKS5), then TLS with the upstream over
        the tunnel (inside the TLS to an https proxy: both loops' start_tls take a TLS
        transport). http through SOCKS5: the tunnel as it is."""
        raw = await open_tunnel(loop, proxy, url.host, url.port, context or self._context())
        conn = Connection(url.origin, loop, self._open)
        if context is None:
            raw.set_protocol(conn)
            conn.connection_made(raw)
            return conn
        try:
            # start_tls hands the connection to `conn` without calling connection_made
            # (asyncio's SSLProtocol with call_connection_made=False; uvloop's alike).
            tls = await loop.start_tls(
                raw,  # type: ignore[arg-type]  # uvloop's transports are not asyncio's
                conn,
                context,
                server_hostname=url.host,
            )
        except BaseException:
            raw.close()
            raise
        if tls is None:  # the loop closed the connection during the handshake
            raise UpstreamError(f"TLS with {url.host}:{url.port} through the proxy failed")
        conn.connection_made(tls)
        return conn

    def reuse(self, conn: Connection) -> None:
        conn.in_use = False
        if self._closed:
            conn.close()
            return
        conn.idle_since = now = time.monotonic()
        idle = self._idle.setdefault(conn.origin, collections.deque())
        idle.append(conn)
        # A burst's extra connections do not stay open: the oldest idle go as they age.
        while idle and (idle[0].lost or now - idle[0].idle_since > self._idle_s):
            idle.popleft().close()

    async def close(self) -> None:
        self._closed = True
        self._idle.clear()
        closing = list(self._open)
        for conn in closing:
            conn.close()
        self._open.clear()
        # A TLS connection says goodbye (close_notify, twice through an https proxy) over
        # a few loop turns; a loop closed before that leaks its socket. Bounded, so a peer
        # that never answers does not hold up the gateway's exit.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await asyncio.gather(*(conn.gone for conn in closing))
