"""A minimal HTTP/1.1 keep-alive client on a raw asyncio Protocol.

One `HttpConnection` carries one request at a time (no pipelining), which is what a
closed-loop worker needs. It costs one `transport.write` per request and one parse of
each response's head; there are no per-request objects beyond a future and the parser,
so the load generator spends its CPU on the server under test, not on itself.
Plain `http://` only: TLS would measure the TLS stack, not the server.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from podserve.bench.wire import BodySink, ProtocolError, ResponseParser

T = TypeVar("T")


class ConnectionClosed(Exception):
    """The server closed the connection before the response was complete."""


class RequestTimeout(Exception):
    """No complete response within the request's timeout."""


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    keep_alive: bool


class HttpConnection(asyncio.Protocol):
    """One keep-alive connection. Use `open_connection` to make one."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self._parser: ResponseParser | None = None
        self._waiter: asyncio.Future[ResponseParser] | None = None
        self.closed = False

    # --- asyncio.Protocol ------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            # Bytes nobody asked for: the connection's framing can no longer be trusted.
            self.close()
            return
        try:
            done = parser.feed(data)
        except ProtocolError as exc:
            self._fail(exc)
            self.close()
            return
        if done:
            self._finish(parser)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        parser = self._parser
        if parser is not None:
            if parser.feed_eof():
                self._finish(parser)
            else:
                self._fail(ConnectionClosed("server closed the connection mid-response"))

    # --- public ------------------------------------------------------------------------
    async def request(
        self, raw: bytes, *, sink: BodySink | None = None, timeout_s: float | None = None
    ) -> Response:
        """Send pre-encoded request bytes and wait for the whole response."""
        if self.closed or self._transport is None:
            raise ConnectionClosed("connection is closed")
        if self._parser is not None:
            raise RuntimeError("HttpConnection carries one request at a time")
        loop = asyncio.get_running_loop()
        waiter: asyncio.Future[ResponseParser] = loop.create_future()
        self._parser = ResponseParser(sink)
        self._waiter = waiter
        self._transport.write(raw)
        timer = loop.call_later(timeout_s, self._on_timeout) if timeout_s else None
        try:
            parser = await waiter
        finally:
            if timer is not None:
                timer.cancel()
        if not parser.keep_alive:
            self.close()
        return Response(parser.status, parser.body, parser.keep_alive)

    def close(self) -> None:
        self.closed = True
        if self._transport is not None:
            self._transport.close()

    # --- internals ---------------------------------------------------------------------
    def _finish(self, parser: ResponseParser) -> None:
        waiter, self._waiter, self._parser = self._waiter, None, None
        if waiter is not None and not waiter.done():
            waiter.set_result(parser)

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter, self._parser = self._waiter, None, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def _on_timeout(self) -> None:
        self._fail(RequestTimeout("no complete response within the request timeout"))
        # A late response would land on the next request: the connection must go.
        self.close()


async def open_connection(host: str, port: int) -> HttpConnection:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(HttpConnection, host, port)
    return protocol


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's event loop when it is installed (about twice as fast for this client)."""
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def uses_uvloop() -> bool:
    return loop_factory() is not None


def run(main: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine on a fresh event loop, uvloop's when available."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
