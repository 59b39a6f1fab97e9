"""A request refused from its URL keeps its connection (issue 15 item 9), on a real server
with a raw socket: the refusal goes out before the body is read, the body that follows is
read past, and the next request on the same connection is answered. Clients that ignore
Retry-After then cost the pod no new connection (accept, a socket, uvicorn's protocol
objects) per attempt. Only the drain closes (`Connection: close`, so that the retry
reaches another pod)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import ServerProcess, wait_until, write_model

pytestmark = pytest.mark.slow

SOCKET_TIMEOUT_S = 30  # only stops a broken build from hanging the suite
BODY = json.dumps(  # ~300 KB, like the overload benchmark's 64-row bodies
    {"inputs": [{"name": "x", "shape": [25_000, 3], "datatype": "FP32", "data": [0.5] * 75_000}]}
).encode()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root: Path = tmp_path_factory.mktemp("models")
    write_model(root, "double", warmup=False)
    with ServerProcess("--model-repository", str(root)) as running:
        wait_until(lambda: running.get("/ready").status_code == 200, what="the model loaded")
        yield running


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        raw += chunk
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers["content-length"]):
        body += sock.recv(65536)
    return int(lines[0].split()[1]), headers, body


def post_head(path: str, length: int) -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def test_a_refusal_before_the_body_keeps_the_connection(server: ServerProcess) -> None:
    with socket.create_connection(("127.0.0.1", server.http_port), SOCKET_TIMEOUT_S) as sock:
        for _ in range(3):  # refused, body read past, again: one connection throughout
            sock.sendall(post_head("/v2/models/not-served/infer", len(BODY)))
            status, headers, body = read_response(sock)  # before a byte of the body
            assert status == 404
            assert "not-served" in json.loads(body)["error"]
            assert headers.get("connection") != "close"
            sock.sendall(BODY)

        small = json.dumps(
            {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}
        ).encode()
        sock.sendall(post_head("/v2/models/double/infer", len(small)) + small)
        status, _, body = read_response(sock)
    assert status == 200, body
    assert json.loads(body)["outputs"][0]["data"] == [2, 4, 6]
