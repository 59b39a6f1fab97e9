"""Bounds on HTTP connections, where uvicorn's httptools protocol has none (issue 15
item 6): request-line-plus-header bytes, the time to send complete headers, and open
connections. The keep-alive idle timeout is uvicorn's own `timeout_keep_alive`.

uvicorn 0.54's `HttpToolsProtocol` (uvicorn/protocols/http/httptools_impl.py) hands
header bytes to llhttp with no size bound (an 8 MB header was accepted), starts its only
timer after a response (so a connection that never completes its headers stays open
forever), and its `limit_concurrency` answers over-limit requests with a plain-text 503
after reading their headers. h11 has `h11_max_incomplete_event_size`, but httptools is
what uvicorn[standard] runs and the faster parser, so the bounds are added here, in a
subclass, at the parser's callbacks:

- header bytes: the URL and every header name and value are counted as the parser
  reports them, and so are the raw bytes of reads that leave the headers incomplete;
  past `max_header_bytes`, a JSON 431 and close (RFC 6585 §5);
- header timeout: a timer from the connection's start (or a request's first byte on a
  kept-alive connection) until the headers are complete; when it fires, a JSON 408 and
  close (RFC 9110 §15.5.9), the slow-loris defence nginx calls client_header_timeout;
- body time: a body not complete within `body_timeout_s` of a read that left it
  incomplete gets the same 408 and close (the app's `receive` then sees the disconnect).
  Without it a client trickling its body a byte at a time held its connection for as long
  as it liked (measured: still open after 40 s). A whole-body deadline, not nginx's
  between-reads client_body_timeout, which a trickle never trips;
- connections: a connection past `max_connections` gets a JSON 503 with Retry-After and
  is closed at once, before a byte of it is read: refusing costs next to nothing;
- malformed HTTP (a bad chunk size, Content-Length with Transfer-Encoding, a control byte
  in a header, an unknown HTTP version...): llhttp refuses it and uvicorn's
  `send_400_response` answers a text/plain "Invalid HTTP request received."; here, a
  JSON 400 naming what llhttp found wrong, and close.

Every refusal is JSON, in the error shape of the edge that sends it (`error_body`).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import orjson
from httptools import HttpParserCallbackError, HttpParserError, HttpParserInvalidURLError
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from podserve.httpedge.coalesce import CoalescingTransport

_REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
}


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_header_bytes: int
    header_timeout_s: float
    max_connections: int
    body_timeout_s: float | None = None  # None: a body may take as long as it likes


# (status, code, message) -> the refusal's JSON body. The code names the refusal where a
# status alone does not: a 408 is `header_timeout` or `body_timeout`.
ErrorBody = Callable[[int, str, str], bytes]


def pod_error_body(status: int, code: str, message: str) -> bytes:
    """The pod's error shape, as every other error it sends: {"error": message}."""
    return orjson.dumps({"error": message})


def bounded_protocol(
    limits: HttpLimits, error_body: ErrorBody = pod_error_body, refusal_headers: bytes = b""
) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol with `limits` (pass as `uvicorn.Config(http=...)`);
    `error_body(status, code, message)` writes a refusal's JSON in the edge's own error
    shape; `refusal_headers` (whole `name: value\r\n` lines) go on every refusal, as the
    edge puts them on its other responses."""
    return type(
        "BoundedHttpToolsProtocol",
        (BoundedHttpToolsProtocol,),
        {
            "limits": limits,
            "error_body": staticmethod(error_body),
            "refusal_headers": refusal_headers,
        },
    )


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    limits: ClassVar[HttpLimits]
    refusal_headers: ClassVar[bytes] = b""

    @staticmethod
    def error_body(status: int, code: str, message: str) -> bytes:  # bounded_protocol's
        return pod_error_body(status, code, message)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_bytes = 0
        self._in_headers = True
        self._refused = False
        self._header_timer: asyncio.TimerHandle | None = None
        self._body_timer: asyncio.TimerHandle | None = None
        self._in_body = False  # headers complete, the message not yet
        # A response's head and body in one write (httpedge/coalesce.py).
        super().connection_made(cast(asyncio.Transport, CoalescingTransport(transport, self.loop)))
        if len(self.connections) > self.limits.max_connections:
            self._refuse(
                503,
                "too_many_connections",
                f"too many open connections (max_connections={self.limits.max_connections}); "
                "retry later or on another replica",
                retry_after=True,
            )
            return
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        self._disarm_body_timer()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        # llhttp reports a header only once its value is complete, so a header that
        # never ends would never be counted: count the raw bytes of every read after
        # which the headers are still incomplete, too. (A pipelined read holding the
        # tail of one body and the start of the next headers is over-counted; clients
        # rarely pipeline, and a refusal then is a 431, not a wrong answer.)
        if self._in_headers and not self._refused:
            self._count(len(data))
        # A body that did not come whole with its headers starts the clock here, after
        # the read: a request whose body arrives with them (nearly all) arms nothing.
        if self._in_body and self._body_timer is None and not self._refused:
            timeout_s = self.limits.body_timeout_s
            if timeout_s is not None:
                self._body_timer = self.loop.call_later(timeout_s, self._body_timeout)

    # --- parser callbacks ------------------------------------------------------------------
    def on_message_begin(self) -> None:
        self._header_bytes = 0
        self._in_headers = True
        if self._header_timer is None:  # the next request on a kept-alive connection
            self._arm_header_timer()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        if self._count(len(url)):
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._count(len(name) + len(value) + 4):  # ": " and CRLF
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        self._in_headers = False
        self._in_body = True
        self._header_bytes = 0
        if not self._refused:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if not self._refused:
            super().on_body(body)

    def on_message_complete(self) -> None:
        self._in_headers = False
        self._in_body = False
        self._disarm_body_timer()
        if not self._refused:
            super().on_message_complete()

    def send_400_response(self, msg: str) -> None:
        """uvicorn's answer to what llhttp cannot parse (`data_received`, in its `except
        HttpParserError`): the same 400 and close, but JSON naming the problem."""
        if self._refused:
            return  # a 431 went out earlier in this read, and the parser went on: one answer
        cycle = self.cycle
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            # A response is half written (its body was still coming in): a status line
            # now would be read as part of it. Cut it short, as a reset would.
            self._cut()
            return
        self._refuse(400, "bad_request", f"malformed HTTP request: {_parser_problem(msg)}")

    # --- bounds ------------------------------------------------------------------------------
    def _count(self, size: int) -> bool:
        if self._refused:
            return False
        self._header_bytes += size
        if self._header_bytes > self.limits.max_header_bytes:
            self._refuse(
                431,
                "headers_too_large",
                f"request line and headers exceed max_header_bytes={self.limits.max_header_bytes}",
            )
            return False
        return True

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(
            self.limits.header_timeout_s, self._header_timeout
        )

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        if self.cycle is not None and not self.cycle.response_complete:
            return  # a request is being answered; its headers did arrive
        self._refuse(
            408,
            "header_timeout",
            f"request headers not complete within header_timeout_s="
            f"{self.limits.header_timeout_s:g}",
        )

    def _disarm_body_timer(self) -> None:
        if self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_timeout(self) -> None:
        self._body_timer = None
        cycle = self.cycle
        if cycle is not None and cycle.response_started:
            # Answered already (an early 401 or 413, say) while the body still trickles
            # in: a second status line cannot follow; just end the connection.
            self._cut()
            return
        self._refuse(
            408,
            "body_timeout",
            f"request body not complete within body_timeout_s={self.limits.body_timeout_s:g}",
        )

    def _cut(self) -> None:
        """End the connection without a response (one is already under way)."""
        self._refused = True
        self.transport.close()

    def _refuse(self, status: int, code: str, message: str, *, retry_after: bool = False) -> None:
        self._refused = True
        self._disarm_header_timer()
        self._disarm_body_timer()
        body = self.error_body(status, code, message)
        head: list[Any] = [
            b"HTTP/1.1 %d %s\r\n" % (status, _REASONS[status]),
            b"content-type: application/json\r\n",
            b"content-length: %d\r\n" % len(body),
            b"connection: close\r\n",
        ]
        if retry_after:
            head.append(b"retry-after: 1\r\n")
        head.append(self.refusal_headers)
        self.transport.write(b"".join([*head, b"\r\n", body]))
        self.transport.close()


def _parser_problem(fallback: str) -> str:
    """What llhttp found wrong, from the HttpParserError being handled: uvicorn passes
    `send_400_response` only its fixed "Invalid HTTP request received.", but llhttp's
    reason is a fixed phrase ("Invalid character in chunk size", "Duplicate
    Content-Length", "Invalid HTTP version") that tells the client what to fix, and
    carries none of the request's bytes."""
    exc = sys.exc_info()[1]
    if isinstance(exc, HttpParserCallbackError):
        # A callback raised: uvicorn's `httptools.parse_url` on a request target llhttp
        # let through ("http://", a port past 65535). Its message echoes the target.
        if isinstance(exc.__context__, HttpParserInvalidURLError):
            return "invalid request target"
        return fallback
    if isinstance(exc, HttpParserError) and str(exc):
        return str(exc)
    return fallback
