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
  close (RFC 9110 §15.5.9), the slow-loris defence nginx calls client_header_timeout.
  Bytes on an idle kept-alive connection that start no message arm it too: uvicorn's
  `data_received` cancels its keep-alive timer on any bytes, and llhttp skips CRLFs
  between messages (RFC 9112 §2.2) without calling `on_message_begin`, so one CRLF after
  a response left a connection with no timer at all, held open forever (1,000 of them
  filled `max_connections`, and every new probe got 503);
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
  JSON 400 naming what llhttp found wrong, and close. Responses go out in request order
  (RFC 9112 §9.3.2): uvicorn writes its 400 at once, ahead of the responses still owed
  to requests pipelined before the malformed one, which the client then took for the
  first request's answer. Here the 400 waits until those are answered, and a malformed
  request queued behind them is never run.

Every refusal is JSON, in the error shape of the edge that sends it (`error_body`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import orjson
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from podserve.httpedge.coalesce import CoalescingTransport
from podserve.httpedge.refusal import parser_problem, refusal

_HTTP_VERSIONS = frozenset({"1.0", "1.1"})


@dataclass(frozen=True, slots=True)
class HttpLimits:
    max_header_bytes: int
    header_timeout_s: float
    max_connections: int
    body_timeout_s: float | None = None  # None: a body may take as long as it likes
    # An edge that decodes no content coding refuses a body sent with one (415), rather
    # than read gzip bytes as JSON ("not valid UTF-8") or ignore a coding it cannot undo.
    refuse_content_encoding: bool = False


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
        self._earlier_cycle: Any = None  # the cycle before the newest (send_400_response)
        self._deferred: tuple[int, str, str] | None = None  # a 400 owed after earlier answers
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
        # Bytes that started no message (CRLFs between messages, which llhttp skips) on an
        # idle connection: uvicorn just cancelled its keep-alive timer, so the header
        # timer must run, or nothing would ever close the connection (the module's doc).
        if self._header_timer is None and not self._refused and self._idle():
            self._arm_header_timer()

    def _idle(self) -> bool:
        """No request is being read or answered, and uvicorn's keep-alive timer is off."""
        cycle = self.cycle
        return (
            self.timeout_keep_alive_task is None
            and not self.pipeline
            and (cycle is None or cycle.response_complete)
        )

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
        if self._refused:
            return
        version = self.parser.get_http_version()
        if version not in _HTTP_VERSIONS:
            # llhttp takes "HTTP/2.0" (and a bare HTTP/0.9 request line) in a request line,
            # and uvicorn would answer it as HTTP/1.1 (RFC 9110 §15.6.6: 505).
            self._refuse_in_order(
                505,
                "http_version_not_supported",
                f"HTTP/{version} is not supported; send HTTP/1.1 (or HTTP/1.0)",
            )
            return
        if self.limits.refuse_content_encoding and self._content_encoding():
            self._refuse_in_order(
                415,
                "unsupported_content_encoding",
                f"Content-Encoding {self._content_encoding()!r} is not supported: send the "
                "body unencoded (supported: identity)",
            )
            return
        self._earlier_cycle = self.cycle
        super().on_headers_complete()

    def _content_encoding(self) -> str:
        """The request's Content-Encoding codings but "identity", comma-joined."""
        codings = [
            coding.strip()
            for name, value in self.headers
            if name == b"content-encoding"
            for coding in value.decode("latin-1").split(",")
        ]
        return ", ".join(c for c in codings if c and c.lower() != "identity")

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
        message = f"malformed HTTP request: {parser_problem(msg)}"
        cycle = self.cycle
        if cycle is not None and cycle.more_body and not cycle.response_complete:
            # llhttp failed inside this cycle's body: the malformed request is its own.
            if self.pipeline and self.pipeline[0][0] is cycle:
                # Pipelined behind requests not yet answered (uvicorn queues the newest
                # at the left): it is never run, and they are answered first.
                self.pipeline.popleft()
                self.cycle = self._earlier_cycle
            elif cycle.response_started:
                # A response is half written (its body was still coming in): a status
                # line now would be read as part of it. Cut it short, as a reset would.
                self._cut()
                return
            else:
                # Running, so the oldest request not answered: refused now (its app
                # sees the disconnect).
                self._refuse(400, "bad_request", message)
                return
        self._refuse_in_order(400, "bad_request", message)

    def _refuse_in_order(self, status: int, code: str, message: str) -> None:
        """Refuse the request being read: now, or once the requests received before it
        are answered (the module's doc); nothing more of the connection is read."""
        if self._answering():
            self._refused = True
            self._disarm_header_timer()
            self._disarm_body_timer()
            self._deferred = (status, code, message)
            return
        self._refuse(status, code, message)

    def _answering(self) -> bool:
        """Some request received whole is not answered yet (running or pipelined)."""
        cycle = self.cycle
        return bool(self.pipeline) or (cycle is not None and not cycle.response_complete)

    def on_response_complete(self) -> None:
        """uvicorn's (a response was sent: start the next pipelined request, or arm the
        keep-alive timer), unless a refusal waits on this response: then it goes now."""
        deferred = self._deferred
        if deferred is None or self.pipeline:
            super().on_response_complete()
            return
        self._deferred = None
        self.server_state.total_requests += 1
        if not self.transport.is_closing():  # the response closed it (`connection: close`)
            self._refuse(*deferred)

    def _unsupported_upgrade_warning(self) -> None:
        """An `Upgrade` this edge does not take is served as the plain HTTP request it
        also is (RFC 9110 §7.8 lets a server ignore it). uvicorn logs two warnings for
        each (one advising to install a WebSocket library): a line per request that any
        client can send, about nothing wrong here."""

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
        self.transport.write(refusal(status, body, self.refusal_headers, retry_after=retry_after))
        self.transport.close()
