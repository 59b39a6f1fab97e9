"""Noticing a client that leaves while its request waits: for budget (`budgetWaitS`), or
for a non-streamed upstream answer.

After the request body, an ASGI server's `receive()` blocks until the client disconnects
and then answers `http.disconnect` (uvicorn's RequestResponseCycle.receive; the ASGI HTTP
spec). The watch is one task awaiting it, started only when something waits (most
requests never need it before their upstream call). Any other message means the server
does not block there (a test's fake `receive`): the watch then never fires, rather than
spin on it.
"""

from __future__ import annotations

import asyncio

from podserve.gateway.asgi import Receive


class ClientWatch:
    __slots__ = ("_receive", "_task")

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._task: asyncio.Task[None] | None = None

    def gone(self) -> asyncio.Future[None]:
        """Completes when the client disconnects (the watch starts at the first call)."""
        if self._task is None:
            self._task = asyncio.ensure_future(self._watch())
        return self._task

    @property
    def left(self) -> bool:
        """Whether the client is known to have left."""
        task = self._task
        return task is not None and task.done() and not task.cancelled()

    def stop(self) -> None:
        """Done waiting: the task's pending `receive()` is cancelled (a stream's relay
        watches for itself)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def _watch(self) -> None:
        message = await self._receive()
        if message["type"] != "http.disconnect":
            await asyncio.get_running_loop().create_future()  # never: see the docstring
