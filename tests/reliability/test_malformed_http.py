"""Requests malformed at the HTTP level, which llhttp refuses before any app sees them, on
a real pod and a real gateway, with raw sockets: each gets a JSON 400 in the edge's own
error shape naming what is wrong (uvicorn's own answer is a text/plain "Invalid HTTP
request received."), the connection is closed, and the server goes on serving."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.support import GatewayProcess
from tests.reliability.test_http_limits import parse
from tests.support.raw_http import connect, read_response, read_until_closed
from tests.support.server import ServerProcess

pytestmark = pytest.mark.slow

MAX_HEADER_BYTES = 4096
POST = b"POST /v2/models/m/infer HTTP/1.1\r\nhost: x\r\n"
CHUNKED = POST + b"transfer-encoding: chunked\r\n\r\n"

# (id, raw request, what the message must name: llhttp's reason, lower-cased)
CASES = [
    ("chunk-size-zz", CHUNKED + b"zz\r\nhello\r\n0\r\n\r\n", "chunk size"),
    ("chunk-size-negative", CHUNKED + b"-5\r\nhello\r\n0\r\n\r\n", "chunk size"),
    ("chunk-size-overflow", CHUNKED + b"f" * 20 + b"\r\nhello\r\n", "chunk size overflow"),
    (
        "chunked-and-content-length",
        POST + b"transfer-encoding: chunked\r\ncontent-length: 5\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        "content-length",
    ),
    ("negative-content-length", POST + b"content-length: -47\r\n\r\n", "content-length"),
    (
        "two-content-lengths",
        POST + b"content-length: 5\r\ncontent-length: 3\r\n\r\nhello",
        "duplicate content-length",
    ),
    ("nul-in-header-value", b"GET /healthz HTTP/1.1\r\nx-a: a\x00b\r\n\r\n", "header value"),
    ("del-in-header-value", b"GET /healthz HTTP/1.1\r\nx-a: a\x7fb\r\n\r\n", "header value"),
    ("non-ascii-path", b"GET /v2/\xff HTTP/1.1\r\nhost: x\r\n\r\n", "url"),
    ("garbage-request-line", b"GARBAGE \r\n\r\n", "method"),
    ("http-9.9", b"GET /healthz HTTP/9.9\r\nhost: x\r\n\r\n", "http version"),
    ("space-in-header-name", b"GET /healthz HTTP/1.1\r\nbad header: 1\r\n\r\n", "header token"),
    # llhttp lets it through; uvicorn's httptools.parse_url in a parser callback refuses it.
    ("empty-absolute-target", b"GET http:// HTTP/1.1\r\nhost: x\r\n\r\n", "request target"),
]


@pytest.fixture(scope="module")
def pod() -> Iterator[ServerProcess]:
    with ServerProcess("--max-header-bytes", str(MAX_HEADER_BYTES)) as server:
        yield server


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    # No pools: these requests never parse, so nothing is routed.
    config = {"store": {"kind": "sqlite", "path": "gw.db"}, "maxHeaderBytes": MAX_HEADER_BYTES}
    with GatewayProcess(config, Path(tmp_path_factory.mktemp("gw-malformed"))) as gateway:
        yield gateway


def exchange(server: ServerProcess, raw: bytes) -> bytes:
    with connect(server) as sock:
        sock.sendall(raw)
        return read_until_closed(sock)  # the server closes after its 400


def still_serving(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nhost: x\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200")


def answered_400(reply: bytes) -> dict[str, object]:
    assert reply.count(b"HTTP/1.1 ") == 1, reply  # one answer, then close
    status, headers, body = parse(reply)  # parse: json.loads of the body
    assert status == 400, reply
    assert headers["content-type"] == "application/json", reply
    assert headers["connection"] == "close", reply
    return body


@pytest.mark.parametrize(("raw", "names"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_pod_answers_a_json_400(pod: ServerProcess, raw: bytes, names: str) -> None:
    message = answered_400(exchange(pod, raw))["error"]
    assert isinstance(message, str)
    assert message.startswith("malformed HTTP request: "), message
    assert names in message.lower(), message
    still_serving(pod)


@pytest.mark.parametrize(("raw", "names"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_gateway_answers_an_openai_shaped_400(
    gateway: GatewayProcess, raw: bytes, names: str
) -> None:
    error = answered_400(exchange(gateway, raw))["error"]
    assert isinstance(error, dict)
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "bad_request"
    assert error["message"].startswith("malformed HTTP request: "), error
    assert names in error["message"].lower(), error
    still_serving(gateway)


def test_a_431_is_not_followed_by_a_400(pod: ServerProcess) -> None:
    """An oversized URL is refused (431) as llhttp reports it, and llhttp goes on parsing
    the same read to the bad version after it, so `send_400_response` is called too: the
    client still gets one answer. (The closed transport drops a late write as well, so
    this holds the outcome, not `send_400_response`'s own check.)"""
    raw = b"GET /" + b"a" * (2 * MAX_HEADER_BYTES) + b" HTTP/9.9\r\nhost: x\r\n\r\n"
    reply = exchange(pod, raw)
    assert reply.count(b"HTTP/1.1 ") == 1, reply[:300]
    assert parse(reply)[0] == 431
    still_serving(pod)
