"""A generation's token stream, counted as in flight for the drain from admission until
it is closed, whatever happens in between.

The engine's sequence was submitted at admission (`EngineClient.admit`), so this object
must end both the sequence and the accounting exactly once: on exhaustion, on error, on
`aclose()`, or, as a last resort, when it is garbage-collected unclosed (a consumer that
went away before reading it, or a sibling sequence of the same request failed first).
"""

from __future__ import annotations

from collections.abc import Callable

from podserve.generation.client import TokenStream
from podserve.generation.stream import TokenEvent


class GenerationStream:
    def __init__(self, events: TokenStream, on_closed: Callable[[], None]) -> None:
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
        self._close()

    def _close(self) -> None:
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is None:
            return
        try:
            self._events.close()  # aborts the sequence in the engine if it runs
        finally:
            on_closed()

    def __del__(self) -> None:
        # Never read to its end nor closed: the sequence's own finaliser frees its engine
        # slot on the loop; only the drain accounting is settled here.
        on_closed, self._on_closed = self._on_closed, None
        if on_closed is not None:
            on_closed()
