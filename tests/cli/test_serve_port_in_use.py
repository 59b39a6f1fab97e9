"""A port in use ends `podserve serve` with one line on stderr and exit code 2, for the
HTTP and the gRPC listener alike: no traceback (uvicorn's bind exits 1 after logging;
grpc.aio's Server, left to the garbage collector after a failed bind, printed "Event
loop is closed" from its __del__)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def held_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _serve(*ports: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "podserve.cli.main",
            "serve",
            "--host",
            "127.0.0.1",
            *ports,
            "--model-repository",
            str(REPO / "examples" / "models"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


@pytest.mark.parametrize("edge", ["http", "grpc"])
def test_a_port_in_use_exits_2_with_one_line(held_port: int, edge: str) -> None:
    if edge == "http":
        done = _serve("--port", str(held_port), "--grpc-port", "0")
    else:
        done = _serve("--port", "0", "--grpc-port", str(held_port))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "Exception ignored" not in done.stderr
    ours = [line for line in done.stderr.splitlines() if line.startswith("podserve serve:")]
    assert ours == [
        f"podserve serve: cannot listen for {edge.upper() if edge == 'http' else 'gRPC'} on "
        f"127.0.0.1:{held_port}: "
        + ("Address already in use" if edge == "http" else "address in use or not available")
    ]
