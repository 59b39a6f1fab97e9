"""One keep-alive HTTP/1.1 connection to an upstream, as an asyncio Protocol, and the
state of the response being read on it (the client and its pool are `upstream_http`).

httptools (llhttp) parses the response: status and headers, the body with chunked coding
removed, and the end of the message. The reader waits on `wait()` for each step and takes
the body's pieces with `take()`; reading pauses while `_READ_PAUSE_BYTES` are unread.
"""

from __future__ import annotations

import asyncio
import collections
from typing import cast

import httptools

_WRITE_CHUNK = 64 * 1024
_READ_PAUSE_BYTES = 1 << 20


class UpstreamError(Exception):
    """The upstream broke the exchange: closed early, or sent what is not HTTP/1.1."""


class UpstreamTimeout(UpstreamError, TimeoutError):
    """No connection, or no next bytes of the response, within the timeout."""


class Connection(asyncio.Protocol):
    """One keep-alive connection; the state of the response being read on it."""

    def __init__(
        self,
        origin: tuple[str, str, int],
        loop: asyncio.AbstractEventLoop,
        registry: set[Connection],
    ) -> None:
        self.origin = origin
        self._loop = loop
        self._registry = registry  # the client's open connections, closed with it
        self._parser = httptools.HttpResponseParser(self)
        self.transport: asyncio.Transport | None = None
        self.lost = False  # closed or closing: never reused
        self.gone = loop.create_future()  # done once the transport is closed (TLS said bye)
        self.in_use = False
        self.idle_since = 0.0
        self._waiter: asyncio.Future[None] | None = None
        self._drained: asyncio.Future[None] | None = None
        self._writing_paused = False
        self.begin()

    def begin(self) -> None:
        self.status = 0
        self.headers: dict[str, str] = {}
        self.head_done = False
        self.done = False
        self.keep_alive = False
        self.error: BaseException | None = None
        self.chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._until_close = False
        self._reading_paused = False
        self._spurious = False
        self.cut = False  # the request's body was not sent whole: never reused

    # --- asyncio.Protocol -------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods
        self.transport = cast(asyncio.Transport, transport)
        self._registry.add(self)

    def data_received(self, data: bytes) -> None:
        if not self.in_use or self.done:  # bytes nobody asked for: untrusted now
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(UpstreamError("upstream switched protocols"))
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(f"malformed response: {exc}"))

    def eof_received(self) -> bool:
        return False  # close our side too: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.gone.done():
            self.gone.set_result(None)
        self._registry.discard(self)
        if self.in_use and not self.done and self.error is None:
            if self.head_done and self._until_close and exc is None:
                self.done = True  # a body without a length ends at the close
            else:
                reason = f": {exc}" if exc else ""
                self.error = UpstreamError(f"upstream closed the connection{reason}")
        self._wake()
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_exception(UpstreamError("upstream closed the connection"))

    def pause_writing(self) -> None:
        self._writing_paused = True

    def resume_writing(self) -> None:
        self._writing_paused = False
        drained = self._drained
        if drained is not None and not drained.done():
            drained.set_result(None)

    # --- httptools callbacks ----------------------------------------------------------
    # The parser goes on past the end of a response within one read; a second response
    # nobody asked for makes the connection untrusted, and it is closed.
    def on_message_begin(self) -> None:
        if self.done:
            self._spurious = True
            self.close()

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._spurious:
            return
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        previous = self.headers.get(key)
        self.headers[key] = text if previous is None else f"{previous}, {text}"

    def on_headers_complete(self) -> None:
        if self._spurious:
            return
        status = self._parser.get_status_code()
        if status < 200:  # 100 Continue and the like: the real response follows
            self.headers = {}
            return
        if status > 599:
            # httptools takes any three digits; RFC 9110 section 15 defines 1xx-5xx. Passed
            # on, uvicorn has no status line for it (a KeyError after the reply began): the
            # client got nothing and the request's settlement never ran.
            self._fail(UpstreamError(f"malformed response: status {status}"))
            return
        self.status = status
        self.head_done = True
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        self._until_close = (
            "content-length" not in self.headers and not chunked and status not in (204, 304)
        )
        self._wake()

    def on_body(self, body: bytes) -> None:
        if self._spurious:
            return
        self.chunks.append(body)
        self._buffered += len(body)
        if self._buffered >= _READ_PAUSE_BYTES and not self._reading_paused:
            assert self.transport is not None
            self.transport.pause_reading()
            self._reading_paused = True
        self._wake()

    def on_message_complete(self) -> None:
        if self._spurious or not self.head_done:
            return  # the end of an informational response
        self.done = True
        self.keep_alive = self._parser.should_keep_alive()
        self._wake()

    # --- the reader's side ------------------------------------------------------------
    def _fail(self, error: UpstreamError) -> None:
        if self.error is None and not self.done:  # bytes after a whole response: close
            self.error = error
        self.close()
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _time_out(self, waiter: asyncio.Future[None], timeout_s: float) -> None:
        if not waiter.done():
            waiter.set_exception(UpstreamTimeout(f"no response bytes for {timeout_s:g} s"))

    async def wait(self, timeout_s: float | None) -> None:
        """Until the parser has more for the reader or the exchange failed."""
        waiter = self._waiter = self._loop.create_future()
        timer = (
            None
            if timeout_s is None
            else self._loop.call_later(timeout_s, self._time_out, waiter, timeout_s)
        )
        try:
            await waiter
        finally:
            self._waiter = None
            if timer is not None:
                timer.cancel()

    def take(self) -> bytes:
        chunk = self.chunks.popleft()
        self._buffered -= len(chunk)
        if self._reading_paused and self._buffered < _READ_PAUSE_BYTES // 2:
            assert self.transport is not None
            self.transport.resume_reading()
            self._reading_paused = False
        return chunk

    async def write_large(self, head: bytes, body: bytes, timeout_s: float | None) -> None:
        """The request in 64 KiB writes; `timeout_s` bounds a wait for the upstream to
        take more (one that stops reading is not waited on for ever). An upstream may
        answer before it has the whole body (a 413, then a close): the rest is not sent,
        the answer is what the caller gets, and the connection is not reused (`cut`)."""
        assert self.transport is not None
        self.transport.write(head)
        view = memoryview(body)
        for start in range(0, len(view), _WRITE_CHUNK):
            if self.head_done:
                self.cut = True
                return
            if self.lost:
                raise UpstreamError("upstream closed the connection")
            self.transport.write(view[start : start + _WRITE_CHUNK])
            if self._writing_paused:
                self._drained = self._loop.create_future()
                try:
                    async with asyncio.timeout(timeout_s):
                        await self._drained
                except TimeoutError:
                    raise UpstreamTimeout(
                        f"upstream took no body bytes for {timeout_s:g} s"
                    ) from None
                except UpstreamError:
                    if not self.head_done:
                        raise
                finally:
                    self._drained = None
            else:
                await asyncio.sleep(0)  # a turn for the loop between chunks

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
        self.lost = True
