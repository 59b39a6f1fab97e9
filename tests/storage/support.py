"""Shared fixtures: a model-file HTTP server on 127.0.0.1 that counts requests and can hold
a transfer half-way (so tests wait on real events, never on sleep), and model builders."""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

WAIT_S = 60.0  # generous: the suite runs on a slow shared 2-core machine


@dataclass
class Hit:
    method: str
    path: str
    range: str | None
    if_range: str | None
    status: int = 0


@dataclass
class ServerState:
    files: dict[str, bytes] = field(default_factory=dict)
    etags: dict[str, str] = field(default_factory=dict)
    hits: list[Hit] = field(default_factory=list)
    # When set, a GET sends this many bytes of its body, then waits for `release`.
    hold_after_bytes: int | None = None
    release: threading.Event = field(default_factory=threading.Event)
    holding: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, path: str, data: bytes) -> None:
        self.files[path] = data
        self.etags[path] = '"' + hashlib.sha256(data).hexdigest()[:16] + '"'

    def gets(self, path: str) -> list[Hit]:
        with self.lock:
            return [h for h in self.hits if h.method == "GET" and h.path == path]


_RANGE = re.compile(r"^bytes=(\d+)-$")


def _handler(state: ServerState) -> type[http.server.BaseHTTPRequestHandler]:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            hit = Hit("GET", self.path, self.headers.get("Range"), self.headers.get("If-Range"))
            with state.lock:
                state.hits.append(hit)
            data = state.files.get(self.path)
            if data is None:
                hit.status = 404
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            etag = state.etags[self.path]
            start = 0
            match = _RANGE.match(hit.range or "")
            if match and (hit.if_range is None or hit.if_range == etag):
                start = int(match.group(1))
                if start >= len(data):
                    hit.status = 416
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                hit.status = 206
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            else:
                hit.status = 200
                self.send_response(200)
            body = data[start:]
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", etag)
            self.end_headers()
            try:
                hold = state.hold_after_bytes
                if hold is not None and hold < len(body):
                    self.wfile.write(body[:hold])
                    self.wfile.flush()
                    state.holding.set()
                    state.release.wait(WAIT_S)
                    body = body[hold:]
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client was killed mid-transfer: exactly what some tests do

    return Handler


@contextlib.contextmanager
def serving(
    server: http.server.ThreadingHTTPServer,
) -> Iterator[http.server.ThreadingHTTPServer]:
    """Serve a stand-in endpoint on its own thread for the block, then stop and join it."""
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(WAIT_S)


@pytest.fixture
def http_server() -> Iterator[tuple[str, ServerState]]:
    state = ServerState()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    with serving(server):
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}", state
        finally:
            state.release.set()  # a held transfer ends before the server stops


def write_model(root: Path, files: dict[str, bytes]) -> Path:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def expected_digest(files: dict[str, bytes]) -> str:
    """The digest per docs/storage.md, computed independently of podserve.storage."""
    lines = sorted(
        (rel.encode(), f"{hashlib.sha256(d).hexdigest()} {len(d)} {rel}\n")
        for rel, d in files.items()
    )
    return "sha256:" + hashlib.sha256("".join(line for _, line in lines).encode()).hexdigest()


# `podserve fetch` in a child process, with only the fetch subcommand registered so that the
# test does not depend on every other CLI module importing cleanly.
_FETCH_MAIN = (
    "import argparse, sys\n"
    "from podserve.cli import fetch\n"
    "p = argparse.ArgumentParser()\n"
    "fetch.register(p.add_subparsers())\n"
    "a = p.parse_args(sys.argv[1:])\n"
    "sys.exit(a.run(a))\n"
)


def spawn_fetch(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    child_env = {**os.environ, **(env or {})}
    child_env.pop("PODSERVE_CACHE_MAX_BYTES", None)
    return subprocess.Popen(
        [sys.executable, "-c", _FETCH_MAIN, "fetch", *args, "--progress", "json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env,
    )


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll a real condition (a file's size, a server-side counter) until it holds, within
    a bounded time; used only where no event can be waited on across processes."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()  # never set: wait() is a short, interruptible pause
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        pause.wait(0.02)
