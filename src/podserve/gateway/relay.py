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
from collections.abc import Awaitable, Callable, Mapping

import aiohttp
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from podserve.gateway.forward import UPSTREAM_ERRORS
from podserve.gateway.sse import EventRelay, StreamTally
from podserve.gateway.store.base import Outcome

Finish = Callable[[Outcome, StreamTally], Awaitable[None]]


class RelayResponse(Response):
    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        relay: EventRelay,
        headers: Mapping[str, str],
        on_finish: Finish,
    ) -> None:
        # Not Response.__init__: it would send `content-length: 0` for an empty body.
        self.status_code = upstream.status
        self.background = None
        self.raw_headers = [
            (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()
        ] + [(b"content-type", b"text/event-stream; charset=utf-8")]
        self._upstream = upstream
        self._relay = relay
        self._on_finish = on_finish

    async def _pump(self, send: Send) -> None:
        async for chunk in self._upstream.content.iter_any():
            out = self._relay.feed(chunk)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
        await send({"type": "http.response.body", "body": self._relay.flush(), "more_body": False})

    @staticmethod
    async def _watch(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )
        pump = asyncio.create_task(self._pump(send))
        watch = asyncio.create_task(self._watch(receive))
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
                self._upstream.release()  # read to the end: the connection is reused
            else:
                self._upstream.close()  # the pod sees the disconnect and stops generating
            await self._on_finish(outcome, self._relay.tally)
