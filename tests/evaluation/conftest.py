"""A stand-in Pushgateway: an HTTP server on 127.0.0.1:0 that records each PUT."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


class Recorder(BaseHTTPRequestHandler):
    requests: list[tuple[str, str, str]] = []

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.requests.append(("PUT", self.path, body))
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass  # keep the test output quiet


@pytest.fixture
def gateway() -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    Recorder.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", Recorder.requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
