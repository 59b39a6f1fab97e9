"""HTTP/1.1 on the wire: request bytes encoded once, and an incremental response parser.

The load generator pre-encodes every request so that sending one costs a single
`transport.write`, and parses only what it needs from a response (status, framing,
keep-alive). The parser is pure: it is fed bytes and says when a response is complete,
so it is tested without a socket.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

BodySink = Callable[[bytes], None]
"""Receives body bytes as they arrive (used for streams); the parser then keeps no body."""

_MAX_HEAD_BYTES = 64 * 1024
_NO_BODY_STATUSES = frozenset({204, 304})

# Parser states.
_HEAD = 0
_FIXED = 1
_CHUNK_SIZE = 2
_CHUNK_DATA = 3
_CHUNK_CRLF = 4
_TRAILERS = 5
_UNTIL_CLOSE = 6
_DONE = 7


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid HTTP/1.1 response."""


def encode_request(
    method: str,
    host: str,
    path: str,
    body: bytes = b"",
    headers: Mapping[str, str] | None = None,
) -> bytes:
    """The complete request as bytes: request line, headers and body."""
    lines = [f"{method} {path} HTTP/1.1", f"Host: {host}"]
    given = {k.lower() for k in (headers or {})}
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if body or method in {"POST", "PUT", "PATCH"}:
        lines.append(f"Content-Length: {len(body)}")
        if "content-type" not in given:
            lines.append("Content-Type: application/json")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head + body


class ResponseParser:
    """Parses one response, fed in arbitrary pieces. `feed` returns True once complete.

    Bodies framed by Content-Length, chunked transfer-encoding, or the end of the
    connection (call `feed_eof`) are supported. With a `sink`, body bytes go to the sink
    as they arrive instead of being kept (streams can be long).
    """

    __slots__ = (
        "_body",
        "_buf",
        "_remaining",
        "_sink",
        "_state",
        "headers",
        "keep_alive",
        "status",
    )

    def __init__(self, sink: BodySink | None = None) -> None:
        self._buf = bytearray()
        self._body = bytearray()
        self._sink = sink
        self._state = _HEAD
        self._remaining = 0
        self.status = 0
        self.keep_alive = True
        self.headers: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self._state == _DONE

    @property
    def body(self) -> bytes:
        return bytes(self._body)

    def feed(self, data: bytes) -> bool:
        if self._state == _DONE:
            if data:
                raise ProtocolError("bytes after a complete response (no request was pending)")
            return True
        self._buf += data
        if self._state == _HEAD and not self._parse_head():
            return False
        return self._parse_body()

    def feed_eof(self) -> bool:
        """The peer closed the connection. True if that completes the response."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            self.keep_alive = False
        return self._state == _DONE

    # --- head ----------------------------------------------------------------------
    def _parse_head(self) -> bool:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > _MAX_HEAD_BYTES:
                raise ProtocolError(f"response head longer than {_MAX_HEAD_BYTES} bytes")
            return False
        lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        del self._buf[: end + 4]
        version, _, rest = lines[0].partition(" ")
        code = rest[:3]
        if not version.startswith("HTTP/1.") or not code.isdigit():
            raise ProtocolError(f"bad status line {lines[0]!r}")
        self.status = int(code)
        if 100 <= self.status < 200:
            # An interim response (e.g. 100 Continue): the real one follows.
            self.status = 0
            return self._parse_head()
        headers = self.headers
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep:
                raise ProtocolError(f"bad header line {line!r}")
            headers[name.strip().lower()] = value.strip()
        connection = headers.get("connection", "").lower()
        self.keep_alive = (
            "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
        )
        if self.status in _NO_BODY_STATUSES:
            self._state = _DONE
        elif "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise ProtocolError(f"bad Content-Length {headers['content-length']!r}") from None
            self._state = _FIXED
        else:
            self._state = _UNTIL_CLOSE
            self.keep_alive = False
        return True

    # --- body ----------------------------------------------------------------------
    def _emit(self, data: bytes | bytearray) -> None:
        if self._sink is None:
            self._body += data
        elif data:
            self._sink(bytes(data))

    def _parse_body(self) -> bool:
        buf = self._buf
        while True:
            state = self._state
            if state == _FIXED:
                take = min(self._remaining, len(buf))
                self._emit(buf[:take])
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    return False
                self._state = _DONE
            elif state == _UNTIL_CLOSE:
                self._emit(buf)
                buf.clear()
                return False
            elif state == _CHUNK_SIZE:
                end = buf.find(b"\r\n")
                if end < 0:
                    return False
                size_text = bytes(buf[:end]).split(b";", 1)[0].strip()
                del buf[: end + 2]
                try:
                    self._remaining = int(size_text, 16)
                except ValueError:
                    raise ProtocolError(f"bad chunk size {size_text!r}") from None
                self._state = _CHUNK_DATA if self._remaining else _TRAILERS
            elif state == _CHUNK_DATA:
                take = min(self._remaining, len(buf))
                self._emit(buf[:take])
                del buf[:take]
                self._remaining -= take
                if self._remaining:
                    return False
                self._state = _CHUNK_CRLF
            elif state == _CHUNK_CRLF:
                if len(buf) < 2:
                    return False
                if buf[:2] != b"\r\n":
                    raise ProtocolError("chunk data not followed by CRLF")
                del buf[:2]
                self._state = _CHUNK_SIZE
            elif state == _TRAILERS:
                if buf[:2] == b"\r\n":
                    del buf[:2]
                    self._state = _DONE
                    continue
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    return False
                del buf[: end + 4]
                self._state = _DONE
            else:  # _DONE
                if buf:
                    raise ProtocolError(f"{len(buf)} unexpected bytes after the response")
                return True
