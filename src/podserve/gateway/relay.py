"""The streamed response: upstream SSE bytes to the client, watching for the client leaving.

uvicorn (ASGI spec 2.3) drops writes to a closed connection silently, so a stream cannot
notice its client is gone by sending; a second task waits on `receive()` for
`http.disconnect`, as Starlette's StreamingResponse does (starlette/responses.py). Whichever
finishes first decides the outcome: the upstream's end (settled from its usage) or the
client's (settled as prompt + tokens sent, and the upstream stream closed so the pod
aborts the generation).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from podserve.gateway.asgi import Headers, Receive, Send
from podserve.gateway.forward import UPSTREAM_ERRORS
from podserve.gateway.sse import EventRelay, StreamTally
from podserve.gateway.store.base import Outcome
from podserve.gateway.upstream_http import UpstreamResponse

Finish = Callable[[Outcome, StreamTally], Awaitable[None]]
_EVENT_STREAM = (b"content-type", b"text/event-stream; charset=utf-8")


async def _pump(upstream: UpstreamResponse, relay: EventRelay, send: Send) -> None:
    async for chunk in upstream.chunks():
        out = relay.feed(chunk)
        if out:
            await send({"type": "http.response.body", "body": out, "more_body": True})
    await send({"type": "http.response.body", "body": relay.flush(), "more_body": False})


async def _watch(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def relay_stream(
    upstream: UpstreamResponse,
    relay: EventRelay,
    headers: Headers,
    on_finish: Finish,
    receive: Receive,
    send: Send,
) -> None:
    """Send the upstream's status and events to the client; settle through `on_finish`."""
    await send(
        {
            "type": "http.response.start",
            "status": upstream.status,
            "headers": [*headers, _EVENT_STREAM],
        }
    )
    pump = asyncio.create_task(_pump(upstream, relay, send))
    watch = asyncio.create_task(_watch(receive))
    outcome = Outcome.CANCELLED
    try:
        done, _ = await asyncio.wait({pump, watch}, return_when=asyncio.FIRST_COMPLETED)
        if pump in done and pump.exception() is None:
            outcome = Outcome.OK
    finally:
        for task in (pump, watch):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, *UPSTREAM_ERRORS):
                await task
        if outcome is Outcome.OK:
            upstream.release()  # read to the end: the connection is reused
        else:
            upstream.close()  # the pod sees the disconnect and stops generating
        await on_finish(outcome, relay.tally)
