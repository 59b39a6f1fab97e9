"""The gateway's connection bounds (maxHeaderBytes, headerTimeoutS, maxConnections) on a
real gateway process, with raw sockets, as the pod's are tested in
tests/reliability/test_http_limits.py: plain uvicorn would read a header of any size and
keep a connection that never completes its headers open for ever. Every refusal is in
OpenAI's error shape, as the gateway's other errors."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.gateway.support import GatewayProcess
from tests.reliability.test_http_limits import parse
from tests.support.raw_http import connect, read_response, read_until_closed


def _gateway(tmp: Path, **bounds: object) -> GatewayProcess:
    return GatewayProcess({"store": {"kind": "sqlite", "path": "gw.db"}, **bounds}, tmp)


@pytest.fixture(scope="module")
def quick(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    config = {"maxHeaderBytes": 2048, "headerTimeoutS": 0.5}
    with _gateway(tmp_path_factory.mktemp("gw-quick"), **config) as gateway:
        yield gateway


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with _gateway(tmp_path_factory.mktemp("gw-capped"), maxConnections=3) as gateway:
        yield gateway


def test_a_huge_header_is_refused_431(quick: GatewayProcess) -> None:
    with connect(quick) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536)
        status, headers, body = parse(read_until_closed(sock))
    assert status == 431
    assert headers["content-type"] == "application/json"
    error = body["error"]
    assert isinstance(error, dict)
    assert error["code"] == "headers_too_large"
    assert "max_header_bytes=2048" in error["message"]


def test_a_silent_connection_is_closed_after_the_header_timeout(quick: GatewayProcess) -> None:
    with connect(quick) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        status, headers, body = parse(read_until_closed(sock))
    assert status == 408
    assert headers["connection"] == "close"
    error = body["error"]
    assert isinstance(error, dict)
    assert error["code"] == "header_timeout"


def test_requests_within_the_bounds_are_served(quick: GatewayProcess) -> None:
    with connect(quick) as sock:
        for _ in range(3):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Ok: " + b"a" * 1000 + b"\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")


def test_a_connection_past_the_cap_is_refused_503(capped: GatewayProcess) -> None:
    held = [connect(capped) for _ in range(3)]
    try:
        for sock in held:  # each accepted and answered: all three are open
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200")
        with connect(capped) as extra:
            status, headers, body = parse(read_until_closed(extra))
        assert status == 503
        assert headers["retry-after"] == "1"
        error = body["error"]
        assert isinstance(error, dict)
        assert error["type"] == "service_unavailable"
        assert "max_connections=3" in error["message"]
    finally:
        for sock in held:
            sock.close()
