"""HTTP connection bounds (issue 15 item 6) on a real server, with raw sockets: an 8 MB
header is refused, half-sent headers and idle connections are closed after the header
timeout, an idle keep-alive connection after the keep-alive timeout, and a connection
past the cap is refused before it is read. Every refusal is JSON."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.raw_http import connect, read_response, read_until_closed
from tests.support.server import ServerProcess, wait_until

pytestmark = pytest.mark.slow

# Generous socket timeouts: they only stop a broken build from hanging the suite; the
# server's own timeouts (well under them) are what end each connection.
SOCKET_TIMEOUT_S = 30
IRIS = Path(__file__).resolve().parents[2] / "examples" / "models" / "iris"
INFER_HEAD = b"POST /v2/models/iris/infer HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"


@pytest.fixture(scope="module")
def quick() -> Iterator[ServerProcess]:
    """Short header, body and keep-alive timeouts; a model whose route reads a body."""
    args = (
        "--header-timeout-s",
        "0.5",
        "--body-timeout-s",
        "0.5",
        "--keep-alive-timeout-s",
        "1",
        "--model",
        f"iris={IRIS}",
    )
    with ServerProcess(*args) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, 120, "iris loaded")
        yield server


@pytest.fixture(scope="module")
def capped() -> Iterator[ServerProcess]:
    """Small header and connection caps, long timeouts."""
    args = (
        "--max-header-bytes",
        "4096",
        "--max-connections",
        "4",
        "--header-timeout-s",
        "60",
        "--keep-alive-timeout-s",
        "60",
    )
    with ServerProcess(*args) as server:
        yield server


def parse(raw: bytes) -> tuple[int, dict[str, str], dict[str, object]]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    return status, headers, json.loads(body)


def test_an_8_mb_header_is_refused_431(capped: ServerProcess) -> None:
    with connect(capped) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ")
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            for _ in range(8 * 16):  # 8 MB in 64 KB pieces; the server closes early
                sock.sendall(b"a" * 65536)
        status, headers, body = parse(read_until_closed(sock))
    assert status == 431
    assert headers["content-type"] == "application/json"
    assert "max_header_bytes=4096" in str(body["error"])


def test_a_header_under_the_cap_is_served(capped: ServerProcess) -> None:
    with connect(capped) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: " + b"a" * 2000 + b"\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_half_sent_headers_are_closed_after_the_header_timeout(quick: ServerProcess) -> None:
    with connect(quick) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        status, headers, body = parse(read_until_closed(sock))
    assert status == 408
    assert headers["connection"] == "close"
    assert "header_timeout_s=0.5" in str(body["error"])


def test_a_silent_connection_is_closed_after_the_header_timeout(quick: ServerProcess) -> None:
    with connect(quick) as sock:
        status, _, _ = parse(read_until_closed(sock))
    assert status == 408


def test_an_idle_keep_alive_connection_is_closed(quick: ServerProcess) -> None:
    with connect(quick) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        # Nothing more is sent: the server closes the connection (EOF), it does not
        # answer 408, since the request before was complete.
        assert read_until_closed(sock) == b""


def test_slow_but_complete_requests_on_one_connection_are_served(quick: ServerProcess) -> None:
    with connect(quick) as sock:
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_a_trickled_body_is_closed_after_the_body_timeout(quick: ServerProcess) -> None:
    """A byte every 0.1 s: each read leaves the body incomplete, and the deadline counts
    from the first of them, not from the last byte (a trickle never goes quiet)."""
    with connect(quick) as sock:
        sock.sendall(INFER_HEAD + b"content-length: 1000\r\n\r\n{")
        sock.settimeout(0.1)
        raw = b""
        for _ in range(int(SOCKET_TIMEOUT_S / 0.1)):
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")
                continue
            if not chunk:
                break
            raw += chunk
        status, headers, body = parse(raw)
    assert status == 408
    assert headers["connection"] == "close"
    assert "body_timeout_s=0.5" in str(body["error"])


def test_a_body_sent_whole_starts_no_clock(quick: ServerProcess) -> None:
    """On one kept-alive connection: two requests whose bodies come with their headers,
    the second after longer than the body timeout; both are answered (no stale timer)."""
    body = json.dumps(
        {"inputs": [{"name": "features", "shape": [1, 4], "datatype": "FP32", "data": [1] * 4}]}
    ).encode()
    request = INFER_HEAD + b"content-length: %d\r\n\r\n" % len(body) + body
    with connect(quick) as sock:
        sock.sendall(request)
        assert read_response(sock).startswith(b"HTTP/1.1 200")
        time.sleep(0.7)  # past body_timeout_s (0.5), within keep_alive_timeout_s (1)
        sock.sendall(request)
        assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_a_connection_past_the_cap_is_refused_503(capped: ServerProcess) -> None:
    held = [connect(capped) for _ in range(4)]
    try:
        for sock in held:  # each has been accepted and answered: all four are open
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")
        with connect(capped) as extra:
            status, headers, body = parse(read_until_closed(extra))
        assert status == 503
        assert headers["retry-after"] == "1"
        assert "max_connections=4" in str(body["error"])
    finally:
        for sock in held:
            sock.close()
    # Closing them frees the slots.
    with connect(capped) as sock:
        for _ in range(200):  # the server notices the closes on its next loop turns
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            reply = read_response(sock)
            if reply.startswith(b"HTTP/1.1 200"):
                break
            sock.close()
            sock = connect(capped)
        assert reply.startswith(b"HTTP/1.1 200")
