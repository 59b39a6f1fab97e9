"""Coalesce the writes of entries that finish together into one script call.

Entries batched into one model call finish in the same instant; writing each result with
its own round trip (and, with redis-py's asyncio pool, its own connection) costs more
than the inference. The writer takes whatever is queued when it wakes, sends it as one
script call (`RedisStreams.apply`), and answers each caller with its own outcome.
Every caller still awaits its own write, so an entry is counted done only once its result
and ack are in Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from podserve.consume.streams import RedisStreams, Write


@dataclass(slots=True)
class _Queued:
    write: Write
    future: asyncio.Future[int]


class ResultWriter:
    def __init__(self, streams: RedisStreams, *, max_batch: int = 512) -> None:
        self._streams = streams
        self._max_batch = max_batch
        self._queue: list[_Queued] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def close(self) -> None:
        """Stop after the queue is empty (callers await their writes, so it is)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def submit(self, write: Write) -> int:
        """The write's script outcome; raises the RedisError that prevented it."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._queue.append(_Queued(write, future))
        self._wake.set()
        return await future

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._queue:
                batch = self._queue[: self._max_batch]
                del self._queue[: self._max_batch]
                await self._flush(batch)

    async def _flush(self, batch: list[_Queued]) -> None:
        try:
            outcomes = await self._streams.apply([q.write for q in batch])
        except Exception as exc:  # no write of the batch happened: each stays pending
            for queued in batch:
                if not queued.future.done():
                    queued.future.set_exception(exc)
            return
        for queued, outcome in zip(batch, outcomes, strict=True):
            if not queued.future.done():
                queued.future.set_result(outcome)
