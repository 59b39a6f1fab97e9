"""Reading generation streams on the HTTP edge: one whole, several merged, and the
finish reason a client sees. Shared by the OpenAI routes and Triton's generate routes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from podserve.core.errors import InferenceFailed
from podserve.dataplane.streams import GenerationStream
from podserve.generation.stream import TokenEvent


async def collect(stream: GenerationStream) -> tuple[str, str, list[TokenEvent]]:
    """One whole sequence: its text, its finish reason, and its token events."""
    parts: list[str] = []
    tokens: list[TokenEvent] = []
    finish = "stop"
    async for event in stream:
        parts.append(event.text)
        if event.token_id is not None:
            tokens.append(event)
        if event.finish_reason is not None:
            finish = finish_reason(event)
    return "".join(parts), finish, tokens


async def merged(
    streams: list[GenerationStream],
) -> AsyncGenerator[tuple[int, TokenEvent], None]:
    """The events of every choice as they come, tagged with the choice's index. One
    choice is read directly (the common case: no task, no queue per token)."""
    if len(streams) == 1:
        try:
            async for event in streams[0]:
                yield 0, event
        finally:
            await streams[0].aclose()
        return
    queue: asyncio.Queue[tuple[int, TokenEvent | Exception | None]] = asyncio.Queue()

    async def pump(index: int, stream: GenerationStream) -> None:
        try:
            async for event in stream:
                queue.put_nowait((index, event))
        except Exception as exc:  # handed to the reader, which ends every choice
            queue.put_nowait((index, exc))
        else:
            queue.put_nowait((index, None))

    tasks = [asyncio.ensure_future(pump(i, s)) for i, s in enumerate(streams)]
    try:
        ended = 0
        while ended < len(streams):
            index, item = await queue.get()
            if item is None:
                ended += 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield index, item
    finally:
        await close_all(streams, tasks)


async def close_all(streams: list[GenerationStream], tasks: Sequence[asyncio.Future[Any]]) -> None:
    """Stop every choice's reader, then close every stream (aborting what still runs)."""
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    for stream in streams:
        await stream.aclose()


def finish_reason(event: TokenEvent) -> str:
    if event.finish_reason in ("stop", "length"):
        return event.finish_reason
    # "abort" means the client left (nobody reads this); "error" ends the stream early.
    raise InferenceFailed(f"generation ended with {event.finish_reason!r}")
