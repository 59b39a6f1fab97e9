"""The pod's HTTP edge (httpedge/limits.py, server/runner.py) on a real `podserve serve`
process, through raw sockets: what llhttp and uvicorn let through that the pod must
answer itself.

- A CRLF after a kept-alive response starts no message (llhttp skips it) but cancels
  uvicorn's keep-alive timer: the header timer must still close the connection.
- A malformed request pipelined behind a valid one: the valid one is answered first.
- `Upgrade: websocket` is served as the plain request it also is (uvicorn ws="none").
- A body with a Content-Encoding is refused 415; an "HTTP/2.0" request line 505.
"""

from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.raw_http import connect, read_response, read_until_closed
from tests.support.server import ServerProcess, wait_until

pytestmark = pytest.mark.slow

# Only stops a broken build from hanging the suite: the server's own timers end each
# connection well before it.
IRIS = Path(__file__).resolve().parents[2] / "examples" / "models" / "iris"
IRIS_BODY = (
    b'{"inputs":[{"name":"features","shape":[1,4],"datatype":"FP32","data":[5.1,3.5,1.4,0.2]}]}'
)
INFER = (
    b"POST /v2/models/iris/infer HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
    b"Content-Length: %d\r\n\r\n" % len(IRIS_BODY) + IRIS_BODY
)
HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    # A short header timeout and a keep-alive timeout the tests never reach: a connection
    # closed here was closed by the header timer.
    args = ("--header-timeout-s", "0.5", "--keep-alive-timeout-s", "600", "--model", f"iris={IRIS}")
    with ServerProcess(*args) as pod:
        wait_until(lambda: pod.get("/ready").status_code == 200, 120, "iris loaded")
        yield pod


def statuses(raw: bytes) -> list[int]:
    return [int(code) for code in re.findall(rb"HTTP/1\.1 (\d{3}) ", raw)]


def json_body(raw: bytes) -> dict[str, object]:
    parsed: dict[str, object] = json.loads(raw.partition(b"\r\n\r\n")[2])
    return parsed


def test_a_crlf_after_a_kept_alive_response_still_meets_the_header_timeout(
    server: ServerProcess,
) -> None:
    with connect(server) as sock:
        sock.sendall(HEALTHZ)
        assert statuses(read_response(sock)) == [200]
        sock.sendall(b"\r\n")  # no message: llhttp skips it, uvicorn's keep-alive timer stops
        rest = read_until_closed(sock)  # without a timer armed, this never returns
    assert statuses(rest) == [408]
    assert "header_timeout_s=0.5" in str(json_body(rest)["error"])


def test_crlfs_then_a_request_are_served(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(HEALTHZ)
        read_response(sock)
        sock.sendall(b"\r\n")
        sock.sendall(HEALTHZ)
        assert statuses(read_response(sock)) == [200]


@pytest.mark.parametrize(
    "malformed",
    [
        # a bad chunk size: the request's headers are complete, its body is not
        b"POST /v2/models/iris/infer HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
        b"\r\nzz\r\n",
        # a control byte in a header: no request at all
        b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x01b\r\n\r\n",
    ],
    ids=["bad-chunk", "bad-header"],
)
def test_a_request_pipelined_before_a_malformed_one_is_answered_first(
    server: ServerProcess, malformed: bytes
) -> None:
    with connect(server) as sock:
        sock.sendall(INFER + INFER + malformed)
        raw = read_until_closed(sock)
    assert statuses(raw) == [200, 200, 400]
    assert raw.count(b'"model_name":"iris"') == 2
    assert b"malformed HTTP request" in raw.rpartition(b"HTTP/1.1 400")[2]
    # the next request proves the server is past the refusals, with nothing logged
    assert server.get("/healthz").status_code == 200
    assert not [r for r in server.logs if "Exception in ASGI" in str(r.get("msg"))]


def test_an_upgrade_to_websocket_is_served_as_plain_http(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(
            b"GET /healthz HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        raw = read_response(sock)
        assert statuses(raw) == [200]
        assert json_body(raw)["status"] == "ok"
        sock.sendall(HEALTHZ)  # and the connection goes on as HTTP
        assert statuses(read_response(sock)) == [200]


@pytest.mark.parametrize(
    ("coding", "body"),
    [("gzip", gzip.compress(IRIS_BODY)), ("br, x-bogus", IRIS_BODY)],
    ids=["gzip", "unknown"],
)
def test_a_content_encoding_is_refused_415(server: ServerProcess, coding: str, body: bytes) -> None:
    with connect(server) as sock:
        sock.sendall(
            b"POST /v2/models/iris/infer HTTP/1.1\r\nHost: x\r\ncontent-type: application/json"
            b"\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n"
            % (coding.encode(), len(body))
            + body
        )
        raw = read_until_closed(sock)
    assert statuses(raw) == [415]
    assert b"accept-encoding: identity" in raw.partition(b"\r\n\r\n")[0]
    assert f"Content-Encoding {coding!r} is not supported" in str(json_body(raw)["error"])


def test_identity_content_encoding_is_served(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(INFER.replace(b"Host: x\r\n", b"Host: x\r\nContent-Encoding: identity\r\n"))
        assert statuses(read_response(sock)) == [200]


def test_an_http_2_request_line_is_refused_505(server: ServerProcess) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET /healthz HTTP/2.0\r\nHost: x\r\n\r\n")
        raw = read_until_closed(sock)
    assert statuses(raw) == [505]
    assert "HTTP/2.0 is not supported" in str(json_body(raw)["error"])
