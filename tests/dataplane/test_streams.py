"""A generation stream settles its drain accounting and closes its engine sequence
exactly once, however it ends, including when it was never iterated; a request's deadline
aborts every sequence still open and makes each read raise `DeadlineExceeded`."""

from __future__ import annotations

import asyncio
import gc

import pytest

from podserve.core.clock import FakeClock
from podserve.core.errors import DeadlineExceeded, InferenceFailed
from podserve.dataplane.streams import GenerationDeadline, GenerationStream
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


# --- the request's deadline --------------------------------------------------------------


class Waiting:
    """A `TokenStream` whose events the test hands in one by one, and whose `close()`
    honours the seam's contract: a read waiting for an event gets the final "abort"."""

    def __init__(self) -> None:
        self._events: asyncio.Queue[TokenEvent] = asyncio.Queue()
        self._ended = False
        self.closes = 0

    def __aiter__(self) -> Waiting:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._ended:  # after its final event, as the engine's streams
            raise StopAsyncIteration
        event = await self._events.get()
        self._ended = event.finish_reason is not None
        return event

    def give(self, event: TokenEvent) -> None:
        self._events.put_nowait(event)

    def close(self) -> None:
        self.closes += 1
        if self.closes == 1:
            self.give(TokenEvent(None, "", "abort"))


def _timed(
    sequences: list[Waiting], count: Count, expired: Count, clock: FakeClock, deadline_s: float
) -> list[GenerationStream]:
    deadline = GenerationDeadline(deadline_s, clock, expired)
    streams = [GenerationStream(s, count, deadline) for s in sequences]
    deadline.arm()
    return streams


async def _turns(n: int = 5) -> None:
    """Let the loop run its ready callbacks (a zero-delay timer among them)."""
    for _ in range(n):
        await asyncio.sleep(0)


async def test_a_deadline_ends_a_waiting_read_and_every_sequence_of_the_request() -> None:
    count, expired, clock = Count(), Count(), FakeClock(10.0)
    sequences = [Waiting(), Waiting()]
    first, second = _timed(sequences, count, expired, clock, deadline_s=10.0)
    sequences[0].give(TokenEvent(7, "a"))
    assert (await anext(first)).token_id == 7  # before its timer ran: a token as usual
    with pytest.raises(DeadlineExceeded, match="deadline passed"):
        await anext(first)  # waits; the timer aborts the sequence, the abort wakes it
    # the sibling was never read after the deadline: aborted and settled all the same
    assert [s.closes for s in sequences] == [1, 1]
    assert (count.closed, expired.closed) == (2, 1)  # drain accounting per sequence, one expiry
    with pytest.raises(DeadlineExceeded):
        await anext(second)
    with pytest.raises(DeadlineExceeded):  # every read says why, never a quiet end
        await anext(first)
    await first.aclose()
    assert (count.closed, [s.closes for s in sequences]) == (2, [1, 1])


async def test_tokens_made_before_the_deadline_are_not_handed_out_after_it() -> None:
    count, expired, clock = Count(), Count(), FakeClock(10.0)
    sequence = Waiting()
    (stream,) = _timed([sequence], count, expired, clock, deadline_s=10.0)
    sequence.give(TokenEvent(1, "late"))  # queued, but the reader was busy elsewhere
    await _turns()
    assert sequence.closes == 1  # the engine was told at the deadline, not at the next read
    with pytest.raises(DeadlineExceeded):
        await anext(stream)


async def test_a_finished_result_stands_and_a_closed_request_leaves_no_timer() -> None:
    count, expired, clock = Count(), Count(), FakeClock(10.0)
    done, closed = Waiting(), Waiting()
    (finished,) = _timed([done], count, expired, clock, deadline_s=10.0)
    done.give(TokenEvent(3, "x", "length"))
    assert (await anext(finished)).finish_reason == "length"  # its last event, in hand
    await _turns()  # the deadline passes before the reader asks for the end
    with pytest.raises(StopAsyncIteration):
        await anext(finished)
    (left,) = _timed([closed], count, expired, clock, deadline_s=10.0)
    await left.aclose()  # the client left before the timer ran
    await _turns()
    assert expired.closed == 0
    assert (count.closed, done.closes, closed.closes) == (2, 1, 1)


async def test_a_timer_that_fires_early_waits_for_the_clock() -> None:
    # uvloop rounds timers to whole milliseconds: the deadline is the clock's, not the loop's
    count, expired, clock = Count(), Count(), FakeClock(10.0)
    sequence = Waiting()
    (stream,) = _timed([sequence], count, expired, clock, deadline_s=10.002)
    read = asyncio.ensure_future(anext(stream))
    await asyncio.sleep(0.02)  # real time passes; the fake clock does not
    assert not read.done()
    assert sequence.closes == 0
    clock.advance(0.002)
    with pytest.raises(DeadlineExceeded):
        await read
    assert (sequence.closes, expired.closed) == (1, 1)
