"""One write per HTTP response: a transport wrapper for uvicorn's httptools protocol, used
by both HTTP edges through `httpedge.limits` (the pod's and the gateway's protocol).

uvicorn writes a response's status line and headers when the app sends
`http.response.start`, and its body on `http.response.body` (two `transport.write` calls
in uvicorn/protocols/http/httptools_impl.py `RequestResponseCycle.send`), and sets
TCP_NODELAY: two send() calls, two TCP segments. A client on another CPU is woken by the
first, reads the head alone, and sleeps again until the body: two wake-ups and two reads
for every response, on the client's CPU, which in a closed loop is the one that bounds its
request rate (docs/gateway.md, "One write per response").

So a head is held until the next write on its connection: the body, which the apps send
in the same step, and both go out in one `writelines` (one writev). A head whose body
does not follow in that loop turn (a stream waiting for its first event) is sent alone at
the next turn, so no response waits on this.

Nothing is written once the transport is closing. asyncio's own transports drop such
writes; uvloop's raise RuntimeError ("unable to perform operation on <TCPTransport
closed=True>", uvloop/handles/stream.pyx `_ensure_alive`), which escaped from a
pipelined request's response after its connection had been refused, as an unhandled
exception of its ASGI task.
"""

from __future__ import annotations

import asyncio
from typing import Any

_STATUS_LINE = b"HTTP/1.1 "  # uvicorn's heads (STATUS_LINE) and only those start so


class CoalescingTransport:
    """A transport whose response head waits for the body's write; everything else is
    the wrapped transport's."""

    __slots__ = ("_head", "_loop", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._head: bytes | None = None

    def write(self, data: bytes) -> None:
        if self._transport.is_closing():
            self._head = None
            return
        head = self._head
        if head is not None:
            self._head = None
            self._transport.writelines((head, data))
        elif data.startswith(_STATUS_LINE):
            # A body that happens to start so is only held until the turn's end.
            self._head = data
            self._loop.call_soon(self._flush)
        else:
            self._transport.write(data)

    def _flush(self) -> None:
        head, self._head = self._head, None
        if head is not None and not self._transport.is_closing():
            self._transport.write(head)

    def close(self) -> None:
        self._flush()  # uvicorn closes right after writing a `connection: close` response
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
