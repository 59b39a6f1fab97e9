"""A generation stream settles its drain accounting exactly once, however it ends,
including when it was never iterated (an async generator would leak that count)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import AsyncGenerator

import pytest

from podserve.core.errors import InferenceFailed
from podserve.dataplane.streams import GenerationStream
from podserve.generation.stream import TokenEvent


class Count:
    def __init__(self) -> None:
        self.closed = 0
        self.body_finished = 0

    def __call__(self) -> None:
        self.closed += 1

    async def events(self, n: int, fail: bool = False) -> AsyncGenerator[TokenEvent, None]:
        try:
            for i in range(n):
                yield TokenEvent(i, str(i))
            if fail:
                raise InferenceFailed("the step failed")
        finally:
            self.body_finished += 1


def test_exhausted_stream_closes_once() -> None:
    count = Count()

    async def run() -> list[int | None]:
        stream = GenerationStream(count.events(3), count)
        tokens = [e.token_id async for e in stream]
        await stream.aclose()
        return tokens

    assert asyncio.run(run()) == [0, 1, 2]
    assert (count.closed, count.body_finished) == (1, 1)


def test_a_failing_stream_closes_once_and_raises() -> None:
    count = Count()

    async def run() -> None:
        async for _ in GenerationStream(count.events(2, fail=True), count):
            pass

    with pytest.raises(InferenceFailed):
        asyncio.run(run())
    assert count.closed == 1


def test_a_stream_closed_midway_closes_its_events() -> None:
    count = Count()

    async def run() -> None:
        stream = GenerationStream(count.events(10), count)
        await stream.__anext__()
        await stream.aclose()
        await stream.aclose()

    asyncio.run(run())
    assert (count.closed, count.body_finished) == (1, 1)


def test_a_stream_never_iterated_still_settles_when_closed_or_dropped() -> None:
    count = Count()

    async def run() -> None:
        await GenerationStream(count.events(3), count).aclose()
        GenerationStream(count.events(3), count)  # dropped at once, never closed
        gc.collect()

    asyncio.run(run())
    assert count.closed == 2
    assert count.body_finished == 0  # nothing ran, so nothing was submitted
