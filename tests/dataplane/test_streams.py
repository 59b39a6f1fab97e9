"""A generation stream settles its drain accounting and closes its engine sequence
exactly once, however it ends, including when it was never iterated."""

from __future__ import annotations

import asyncio
import gc

import pytest

from podserve.core.errors import InferenceFailed
from podserve.dataplane.streams import GenerationStream
from podserve.generation.client import TokenStream
from podserve.generation.stream import TokenEvent


class Sequence:
    """A `TokenStream` of `n` tokens, that may fail after them; counts its closes."""

    def __init__(self, n: int, fail: bool = False) -> None:
        self._left = n
        self._next = 0
        self._fail = fail
        self.closes = 0

    def __aiter__(self) -> Sequence:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._left == 0:
            if self._fail:
                raise InferenceFailed("the step failed")
            raise StopAsyncIteration
        self._left -= 1
        self._next += 1
        return TokenEvent(self._next - 1, str(self._next - 1))

    def close(self) -> None:
        self.closes += 1


class Count:
    def __init__(self) -> None:
        self.closed = 0

    def __call__(self) -> None:
        self.closed += 1


def _stream(sequence: TokenStream, count: Count) -> GenerationStream:
    return GenerationStream(sequence, count)


def test_exhausted_stream_closes_once() -> None:
    count, sequence = Count(), Sequence(3)

    async def run() -> list[int | None]:
        stream = _stream(sequence, count)
        tokens = [e.token_id async for e in stream]
        await stream.aclose()
        return tokens

    assert asyncio.run(run()) == [0, 1, 2]
    assert (count.closed, sequence.closes) == (1, 1)


def test_a_failing_stream_closes_once_and_raises() -> None:
    count, sequence = Count(), Sequence(2, fail=True)

    async def run() -> None:
        async for _ in _stream(sequence, count):
            pass

    with pytest.raises(InferenceFailed):
        asyncio.run(run())
    assert (count.closed, sequence.closes) == (1, 1)


def test_a_stream_closed_midway_closes_its_sequence() -> None:
    count, sequence = Count(), Sequence(10)

    async def run() -> None:
        stream = _stream(sequence, count)
        await stream.__anext__()
        await stream.aclose()
        await stream.aclose()

    asyncio.run(run())
    assert (count.closed, sequence.closes) == (1, 1)


def test_a_stream_never_iterated_still_settles_when_closed_or_dropped() -> None:
    count, closed, dropped = Count(), Sequence(3), Sequence(3)

    async def run() -> None:
        await _stream(closed, count).aclose()
        _stream(dropped, count)  # dropped at once, never closed
        gc.collect()

    asyncio.run(run())
    assert count.closed == 2
    # a dropped stream leaves its sequence to the sequence's own finaliser
    assert (closed.closes, dropped.closes) == (1, 0)
