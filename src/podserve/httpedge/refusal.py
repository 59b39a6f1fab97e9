"""The bytes of a refusal the HTTP edges' protocol writes itself (`httpedge/limits.py`),
outside any request's ASGI cycle: a whole JSON response and `connection: close`."""

from __future__ import annotations

import sys

from httptools import HttpParserCallbackError, HttpParserError, HttpParserInvalidURLError

REASONS = {
    400: b"Bad Request",
    408: b"Request Timeout",
    415: b"Unsupported Media Type",
    431: b"Request Header Fields Too Large",
    503: b"Service Unavailable",
    505: b"HTTP Version Not Supported",
}


def refusal(status: int, body: bytes, extra_headers: bytes = b"", *, retry_after: bool) -> bytes:
    """A whole response: `status`, the JSON `body`, `connection: close`, and
    `extra_headers` (whole `name: value\r\n` lines)."""
    head = [
        b"HTTP/1.1 %d %s\r\n" % (status, REASONS[status]),
        b"content-type: application/json\r\n",
        b"content-length: %d\r\n" % len(body),
        b"connection: close\r\n",
    ]
    if retry_after:
        head.append(b"retry-after: 1\r\n")
    if status == 415:  # the codings that would be taken (RFC 9110 §15.5.16)
        head.append(b"accept-encoding: identity\r\n")
    return b"".join([*head, extra_headers, b"\r\n", body])


def parser_problem(fallback: str) -> str:
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
