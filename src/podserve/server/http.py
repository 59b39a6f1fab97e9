"""Minimal ASGI plumbing: a request context, a response value, body reading with a limit.

podserve talks ASGI directly rather than through a framework on its hot path: the
inference route needs control of disconnects, `Connection: close` during a drain and
binary bodies, and a framework's per-request objects cost more than the whole decode.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from podserve.admission import Reservation
from podserve.core.errors import InvalidInput, PayloadTooLarge

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

JSON = b"application/json"


@dataclass(slots=True)
class Response:
    status: int
    body: bytes
    content_type: bytes = JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class StreamingResponse:
    """A response whose body is produced while it is sent (server-sent events)."""

    status: int
    chunks: AsyncIterator[bytes]
    content_type: bytes = b"text/event-stream"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


async def send_streaming(send: Send, response: StreamingResponse, request_id: str) -> None:
    headers = [
        (b"content-type", response.content_type),
        (b"cache-control", b"no-cache"),
        (b"x-request-id", request_id.encode()),
        *response.headers,
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    async for chunk in response.chunks:
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def json_response(
    status: int, payload: object, headers: list[tuple[bytes, bytes]] | None = None
) -> Response:
    return Response(
        status, orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY), JSON, headers or []
    )


# A body past this is joined off the event loop (Request._read_body); below it the copy
# is shorter than the hop to a thread and back.
JOIN_OFF_LOOP_BYTES = 1024 * 1024


@dataclass(slots=True)
class Request:
    scope: Scope
    receive: Receive
    method: str
    path: str
    headers: dict[str, str]
    request_id: str
    path_params: dict[str, str] = field(default_factory=dict)
    model: str = ""
    # the queue slot admission promised before the body was read (DataPlane.admit_early)
    reservation: Reservation | None = None
    _body: bytes | None = None

    def release_reservation(self) -> None:
        if self.reservation is not None:
            self.reservation.release()

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    async def body(self, limit_bytes: int) -> bytes:
        """The whole body, read once (later calls return it again)."""
        if self._body is None:
            self._body = await self._read_body(limit_bytes)
        return self._body

    async def _read_body(self, limit_bytes: int) -> bytes:
        declared = self.headers.get("content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                raise InvalidInput(f"content-length {declared!r} is not an integer") from None
            if size > limit_bytes:
                raise PayloadTooLarge(
                    f"request body of {size} bytes exceeds max_body_bytes={limit_bytes}"
                )
        chunks: list[bytes] = []
        total = 0
        while True:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                raise ClientGone()
            chunk = message.get("body", b"")
            total += len(chunk)
            if total > limit_bytes:
                raise PayloadTooLarge(f"request body exceeds max_body_bytes={limit_bytes}")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        if len(chunks) == 1:
            return chunks[0]
        if total > JOIN_OFF_LOOP_BYTES:
            # bytes.join releases the GIL for its copy past 1 MiB (CPython's
            # stringlib/join.h, GIL_THRESHOLD), so on a thread the loop runs meanwhile: on
            # the loop, joining a 60 MB body held /healthz ~45 ms.
            return await asyncio.to_thread(b"".join, chunks)
        return b"".join(chunks)


# What a control request's body may hold (the repository extension's index, load and
# unload; the shared-memory extension's register and unregister). Legitimately each is a
# few dozen bytes, and each is parsed on the event loop: uncapped, 15 MB of empty JSON
# lists held the loop 9.2 s. 64 KiB of the worst JSON decodes in about 1 ms.
CONTROL_BODY_BYTES = 64 * 1024


async def control_body(request: Request, max_body_bytes: int, what: str, why: str = "") -> bytes:
    """The body of a control request, at most `CONTROL_BODY_BYTES` (or `max_body_bytes`
    when lower); past it, PayloadTooLarge naming `what` and the limit (and `why`)."""
    limit = min(max_body_bytes, CONTROL_BODY_BYTES)
    try:
        return await request.body(limit)
    except PayloadTooLarge:
        raise PayloadTooLarge(f"a {what} request body is at most {limit} bytes{why}") from None


class ClientGone(Exception):
    """The client disconnected before we answered; nothing is sent."""


async def send_response(send: Send, response: Response, request_id: str) -> None:
    headers = [
        (b"content-type", response.content_type),
        (b"content-length", str(len(response.body)).encode()),
        (b"x-request-id", request_id.encode()),
        *response.headers,
    ]
    await send({"type": "http.response.start", "status": response.status, "headers": headers})
    await send({"type": "http.response.body", "body": response.body})
