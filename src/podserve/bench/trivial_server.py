"""A server that answers every request with `200 {}` and does nothing else: the target
against which the load generator measures its own ceiling (`podserve bench --self-test`).

Two kinds: `raw`, an asyncio Protocol that costs as little as a Python server can, so
what is measured is mostly the client; and `uvicorn`, a bare ASGI app, the floor of any
uvicorn-based server. It runs as its own process (`python -m podserve.bench.trivial_server`)
so that it does not share the client's event loop; it prints `PORT <n>` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Literal, cast

ServerKind = Literal["raw", "uvicorn"]
_RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"


class _RawOk(asyncio.Protocol):
    def __init__(self) -> None:
        self._buf = b""
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        buf = self._buf + data
        replies = 0
        while True:
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                break
            head = buf[:end].lower()
            length = 0
            at = head.find(b"content-length:")
            if at >= 0:
                line_end = head.find(b"\r\n", at)
                length = int(head[at + 15 : line_end if line_end >= 0 else None])
            if len(buf) < end + 4 + length:
                break
            buf = buf[end + 4 + length :]
            replies += 1
        self._buf = buf
        if replies and self._transport is not None:
            self._transport.write(_RESPONSE * replies)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]


async def _asgi_ok(
    scope: Scope,
    receive: Callable[[], Awaitable[Message]],
    send: Callable[[Message], Awaitable[None]],
) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b"{}"})


def _listen(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(1024)
    return sock


async def _serve_raw(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_RawOk, sock=sock)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def serve(kind: ServerKind, port: int) -> None:
    sock = _listen(port)
    print(f"PORT {sock.getsockname()[1]}", flush=True)
    if kind == "raw":
        from podserve.bench.client import run

        run(_serve_raw(sock))
        return
    import uvicorn

    config = uvicorn.Config(_asgi_ok, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


_CHILD_MAIN = "import sys; from podserve.bench.trivial_server import main; main(sys.argv[1:])"


class TrivialServer:
    """The trivial server in a child process; a context manager that stops it on exit."""

    def __init__(self, kind: ServerKind = "raw") -> None:
        self.kind = kind
        self.port = 0
        self._process: subprocess.Popen[str] | None = None

    def __enter__(self) -> TrivialServer:
        self._process = subprocess.Popen(
            # Not `-m`: the package imports this module first, which runpy warns about.
            [sys.executable, "-c", _CHILD_MAIN, "--kind", self.kind],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        assert self._process.stdout is not None
        line = self._process.stdout.readline()
        if not line.startswith("PORT "):
            self.__exit__(None, None, None)
            raise RuntimeError(f"trivial server did not start (said {line!r})")
        self.port = int(line.split()[1])
        return self

    def __exit__(self, *exc_info: object) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stdout is not None:
            process.stdout.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kind", choices=["raw", "uvicorn"], default="raw")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        serve(args.kind, args.port)


if __name__ == "__main__":
    main()
