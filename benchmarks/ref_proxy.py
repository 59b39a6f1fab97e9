"""A reference hop for the gateway benchmark: HAProxy (Debian's `haproxy`, C, one thread)
in HTTP mode in front of the same pod, in the same CPU slot as the gateway.

What the gateway adds against a direct call mixes two things: its own work, and what any
extra hop costs on this machine (another process woken, another core crossed). HAProxy does
the least a proxy can do for a request, so the gateway's added time is reported beside
HAProxy's in the same interleaved run: a layout in which HAProxy itself adds milliseconds
is one that no proxy can meet a 1 ms target in.

`option http-no-delay`: without it HAProxy 2.6 held a pod's whole SSE stream until the end
(measured: first event at 21 ms, with the last), because it sends with MSG_MORE while it
expects more of a message (docs.haproxy.org/2.6/configuration.html#4-option%20http-no-delay,
"interactive" traffic). Streams are what this hop is measured on, so it is set.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import harness


@dataclass(frozen=True)
class RefProxy:
    url: str
    pid: int


def _config(port: int, upstream: str) -> str:
    host, _, up_port = upstream.removeprefix("http://").partition(":")
    return f"""global
    nbthread 1
    maxconn 4096
defaults
    mode http
    option http-no-delay
    timeout connect 5s
    timeout client 60s
    timeout server 60s
frontend ref
    bind 127.0.0.1:{port}
    default_backend pod
backend pod
    server pod {host}:{up_port} maxconn 4096
"""


@contextlib.contextmanager
def haproxy(upstream: str, workdir: Path) -> Iterator[RefProxy | None]:
    """HAProxy in front of `upstream` (http://host:port); None when it is not installed,
    so the benchmark still runs without the reference."""
    if shutil.which("haproxy") is None:
        yield None
        return
    port = harness.free_port()
    config = workdir / f"ref-proxy-{port}.cfg"
    config.write_text(_config(port, upstream))
    with (workdir / f"ref-proxy-{port}.log").open("ab") as log:
        proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(config)], stdout=log, stderr=subprocess.STDOUT
        )
    try:
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start: see {config.with_suffix('.log')}")
            time.sleep(0.05)  # a readiness poll on the listening port
        yield RefProxy(f"http://127.0.0.1:{port}", proc.pid)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
