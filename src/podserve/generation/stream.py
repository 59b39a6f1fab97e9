"""Token events and the per-request stream the engine thread writes and a client reads."""

from __future__ import annotations

import asyncio
import contextlib
import queue
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Literal

from podserve.generation.sampling import TokenLogprob

FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True, slots=True)
class TokenEvent:
    """One sampled token (`token_id`) and the text it made visible (`text`, maybe "").

    The last event of a stream has `finish_reason` set. An abort or error ends the
    stream with an event that carries no token.
    """

    token_id: int | None
    text: str
    finish_reason: FinishReason | None = None
    # On a request's first token only: seconds it waited before a step computed for it.
    queued_s: float | None = None
    # When the request asked for log-probabilities (`SamplingParams.logprobs`).
    logprob: TokenLogprob | None = None


class RequestStream:
    """Written by the engine thread, read by one consumer: asynchronously when the
    request was submitted from a running event loop (events hop onto it with
    `call_soon_threadsafe`), otherwise by blocking iteration."""

    def __init__(self, request_id: str, loop: asyncio.AbstractEventLoop | None) -> None:
        self.request_id = request_id
        self._loop = loop
        self._async_queue: asyncio.Queue[TokenEvent] | None = asyncio.Queue() if loop else None
        self._sync_queue: queue.SimpleQueue[TokenEvent] = queue.SimpleQueue()
        self.finished = False  # set by the engine, under its lock, with the last put

    def put(self, event: TokenEvent) -> None:
        if self._loop is not None and self._async_queue is not None:
            # a closed loop means the consumer is gone: nobody is listening any more
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._async_queue.put_nowait, event)
        else:
            self._sync_queue.put(event)

    def __iter__(self) -> Iterator[TokenEvent]:
        if self._loop is not None:
            raise RuntimeError("submitted from an event loop: use `async for`")
        while True:
            event = self._sync_queue.get()
            yield event
            if event.finish_reason is not None:
                return

    async def __aiter__(self) -> AsyncIterator[TokenEvent]:
        if self._async_queue is None:
            raise RuntimeError("submitted outside an event loop: iterate synchronously")
        while True:
            event = await self._async_queue.get()
            yield event
            if event.finish_reason is not None:
                return
