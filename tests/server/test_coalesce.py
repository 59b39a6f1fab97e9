"""Both HTTP edges (the pod's and the gateway's) send a response's head and body in one
write (httpedge/coalesce.py).

The writes are observed on a recording transport (what uvicorn hands its protocol is a
C object whose segments a test cannot see); the protocols themselves are exercised end to
end by every test that talks to a real pod or gateway process, and below on a real
uvicorn server."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import pytest
import uvicorn

from podserve.config.gateway_config import GatewayConfig
from podserve.gateway.edge import gateway_protocol
from podserve.httpedge.coalesce import CoalescingTransport
from podserve.httpedge.limits import HttpLimits, bounded_protocol


class Recording:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[bytes, ...]]] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.calls.append(("write", (data,)))

    def writelines(self, data: Any) -> None:
        self.calls.append(("writelines", tuple(data)))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> str:
        return f"extra:{name}"


async def test_a_head_and_its_body_go_out_in_one_call() -> None:
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    t.write(b"{}")
    t.write(b"more")  # not a head: straight through
    await asyncio.sleep(0)  # the turn's flush finds nothing left
    assert raw.calls == [
        ("writelines", (b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", b"{}")),
        ("write", (b"more",)),
    ]
    assert t.get_extra_info("peername") == "extra:peername"


async def test_a_head_alone_goes_out_at_the_next_turn_and_before_a_close() -> None:
    raw = Recording()
    t = CoalescingTransport(raw, asyncio.get_running_loop())  # type: ignore[arg-type]
    t.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")  # a stream's head
    assert raw.calls == []
    await asyncio.sleep(0)
    assert raw.calls == [("write", (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",))]
    t.write(b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n{}")  # uvicorn's own
    t.close()
    assert raw.calls[-1] == ("write", (b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\n\r\n{}",))
    assert raw.closed


@pytest.mark.parametrize(
    "protocol",
    [gateway_protocol(GatewayConfig()), bounded_protocol(HttpLimits(8192, 10.0, 100))],
    ids=["gateway", "pod"],
)
async def test_responses_through_the_protocols_on_a_real_server(protocol: type) -> None:
    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = scope["path"].encode()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": body})

    config = uvicorn.Config(app, http=protocol, lifespan="off", log_config=None)
    server = uvicorn.Server(config)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        # The socket already listens: the kernel queues this connection until uvicorn
        # accepts it.
        reader, writer = await asyncio.open_connection(*sock.getsockname())
        for path in ("/a", "/bb", "/ccc"):  # keep-alive: three responses on one connection
            writer.write(f"GET {path} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"transfer-encoding: chunked" in head
            assert await reader.readuntil(b"0\r\n\r\n") == b"%x\r\n%s\r\n0\r\n\r\n" % (
                len(path),
                path.encode(),
            )
        (connection,) = server.server_state.connections
        assert isinstance(connection.transport, CoalescingTransport)
        writer.close()
    finally:
        server.should_exit = True
        await serving
