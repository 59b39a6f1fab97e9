"""HTTP/1.1 by hand on a socket, for tests of what a client library would not send."""

from __future__ import annotations

import contextlib
import socket

from tests.support.server import ServerProcess

SOCKET_TIMEOUT_S = 30


def connect(server: ServerProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.http_port), timeout=SOCKET_TIMEOUT_S)


def read_until_closed(sock: socket.socket) -> bytes:
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def read_response(sock: socket.socket) -> bytes:
    """One whole response (status line, headers, a content-length body)."""
    raw = b""
    while b"\r\n\r\n" not in raw:
        raw += sock.recv(65536)
    head, _, body = raw.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        body += chunk
        raw += chunk
    return raw
