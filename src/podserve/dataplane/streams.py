"""A generation's token stream, counted as in flight for the drain from admission until
it is closed, whatever happens in between; and the request's deadline over its streams.

The engine's sequence was submitted at admission (`EngineClient.admit`), so this object
must end both the sequence and the accounting exactly once: on exhaustion, on error, on
`aclose()`, on its deadline, or, as a last resort, when it is garbage-collected unclosed
(a consumer that went away before reading it, or a sibling sequence of the same request
failed first).

A deadline that passes after admission (`GenerationDeadline`) ends the request's
sequences the way a cancellation does, through `TokenStream.close()`: the engine aborts
them, freeing their slots and KV cache at once, and the tokens they made are counted in
the token metrics. The reader is then told why: every read raises `DeadlineExceeded`
(a 504, or an edge's in-band error once a stream's response has started), never a
partial result that looks finished.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence

from podserve.core.clock import Clock
from podserve.core.errors import DeadlineExceeded
from podserve.generation.client import TokenStream
from podserve.generation.stream import TokenEvent

# uvloop keeps timers in whole milliseconds, so one may fire just before its time.
_REARM_S = 0.001


class GenerationStream:
    def __init__(
        self,
        events: TokenStream,
        on_closed: Callable[[], None],
        deadline: GenerationDeadline | None = None,
    ) -> None:
        self._events = events
        self._on_closed: Callable[[], None] | None = on_closed
        self._deadline = deadline
        self._expired: str | None = None  # DeadlineExceeded's message, once it passed
        self._delivered_finish = False
        if deadline is not None:
            deadline.watch(self)

    def __aiter__(self) -> GenerationStream:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._expired is not None:
            raise DeadlineExceeded(self._expired)
        try:
            event = await self._events.__anext__()
        except BaseException:  # the end, an error or a cancellation: account it now
            await self.aclose()
            raise
        if self._expired is not None:
            # The deadline passed while this read waited: the engine's abort woke it (or
            # a token made just before the deadline did).
            raise DeadlineExceeded(self._expired)
        if event.finish_reason is not None:
            self._delivered_finish = True
        return event

    async def aclose(self) -> None:
        self._close()

    def expire(self, message: str) -> bool:
        """The request's deadline passed: abort the sequence and settle it now, as a
        cancellation does, and make every read raise `DeadlineExceeded(message)`. False,
        changing nothing, when the stream has ended already or its reader has its last
        event: a complete result stands."""
        if self._on_closed is None or self._delivered_finish:
            return False
        self._expired = message
        self._close()
        return True

    def _close(self) -> None:
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is None:
            return
        try:
            # Aborts the sequence in the engine if it runs; a read waiting for its next
            # event then gets the final "abort" event (the `TokenStream` contract).
            self._events.close()
        finally:
            on_closed()
            if self._deadline is not None:
                self._deadline.closed()

    def __del__(self) -> None:
        # Never read to its end nor closed: the sequence's own finaliser frees its engine
        # slot on the loop; only the drain accounting is settled here. (A deadline keeps
        # only a weak reference and finds nothing left to expire when it fires.)
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is not None:
            on_closed()


class GenerationDeadline:
    """One generation request's deadline over all its streams (OpenAI's `n` sequences
    share it): a timer on the event loop that expires every stream still open when the
    deadline passes, and calls `on_expired` once if it expired any. It is cancelled when
    the last stream closes, so a finished request leaves no timer behind.

    Create it, then the streams (each registers itself), then `arm()`, all on the loop
    that reads the streams; `deadline_s` is on `clock`, the data plane's."""

    def __init__(
        self,
        deadline_s: float,
        clock: Clock,
        on_expired: Callable[[], None],
    ) -> None:
        self._deadline_s = deadline_s
        self._clock = clock
        self._on_expired = on_expired
        self._admitted_s = clock.now_s()
        self._streams: list[weakref.ref[GenerationStream]] = []
        self._open = 0
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, stream: GenerationStream) -> None:
        self._streams.append(weakref.ref(stream))
        self._open += 1

    def arm(self) -> None:
        if self._open:
            self._schedule(self._deadline_s - self._clock.now_s())

    def closed(self) -> None:
        """One watched stream closed (by its reader, its end, or this deadline)."""
        self._open -= 1
        if self._open == 0 and self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _schedule(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(max(delay_s, 0.0), self._fire)

    def _fire(self) -> None:
        now = self._clock.now_s()
        if now < self._deadline_s:
            self._schedule(max(self._deadline_s - now, _REARM_S))
            return
        self._timer = None
        elapsed_ms = (now - self._admitted_s) * 1000
        message = (
            f"request deadline passed {elapsed_ms:.0f} ms after the generation was admitted; "
            "generation stopped"
        )
        expired = [stream.expire(message) for stream in _alive(self._streams)]
        if any(expired):
            self._on_expired()


def _alive(refs: Sequence[weakref.ref[GenerationStream]]) -> list[GenerationStream]:
    return [stream for ref in refs if (stream := ref()) is not None]
