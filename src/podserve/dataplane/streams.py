"""A generation's token stream, counted as in flight for the drain from admission until
it is closed, whatever happens in between.

An async generator would not do: one that never started (its consumer went away before
the first `__anext__`, or a sibling sequence of the same request failed first) runs no
`finally` when closed or collected, and the drain would wait for it until its timeout.
This object ends its accounting exactly once: on exhaustion, on error, on `aclose()`,
or, as a last resort, when it is garbage-collected unclosed.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Callable

from podserve.generation.stream import TokenEvent


class GenerationStream:
    def __init__(
        self, events: AsyncGenerator[TokenEvent, None], on_closed: Callable[[], None]
    ) -> None:
        self._events = events
        self._on_closed: Callable[[], None] | None = on_closed

    def __aiter__(self) -> GenerationStream:
        return self

    async def __anext__(self) -> TokenEvent:
        try:
            return await self._events.__anext__()
        except BaseException:  # the end, an error or a cancellation: account it now
            await self.aclose()
            raise

    async def aclose(self) -> None:
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is None:
            return
        try:
            await self._events.aclose()  # aborts the sequence in the engine if it runs
        finally:
            on_closed()

    def __del__(self) -> None:
        # Never iterated nor closed: nothing was submitted to the engine (that happens in
        # the generator's body), so only the accounting is left to settle.
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is not None:
            on_closed()
