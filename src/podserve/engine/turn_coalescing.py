"""A model worker's dispatch, put off to the end of the event loop's turn while requests
keep arriving together (`TurnCoalescing`).

Why: work-conserving batching dispatches the moment a request finds a worker idle. Under
concurrency the requests of one loop turn arrive a few callbacks apart (uvloop reads
every ready socket, then runs each request's handler in turn), so the first of them went
alone to the idle worker and the rest waited for its completion: at W1 c=64 over REST the
batches were 18-23 rows where 26-30 were there to take. Dispatching once the turn's
handlers have run, and for a few more turns while each one adds requests, takes the whole
cohort in one model call. Measured (`benchmarks/table.py --only on --workloads w1
--variant`, 4 alternated rounds): server CPU per request 0.84-0.90x at c=64, c=1
unchanged (0.92-1.06x, within the rounds' spread).

Only under concurrency: a request that is alone in the worker is dispatched at once (the
caller checks), so a lone client never waits a turn. Turns, not time: uvloop's timers
have whole-millisecond resolution, far coarser than a W1 model call (~0.2 ms), and a turn
that brings no new request ends the wait, so a steady trickle waits at most `max_turns`
turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

MAX_TURNS = 3


class TurnCoalescing:
    """Calls `pump` at the end of the loop's turn, or up to `max_turns` turns later while
    each turn grows `queued()` and `idle()` workers wait; many requests, one call."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        pump: Callable[[], None],
        queued: Callable[[], int],
        idle: Callable[[], int],
        max_turns: int = MAX_TURNS,
    ) -> None:
        self._loop = loop
        self._pump = pump
        self._queued = queued
        self._idle = idle
        self._max_turns = max_turns
        self._handle: asyncio.Handle | None = None
        self._turns = 0
        self._seen = 0

    def request(self) -> None:
        """Pump soon; requests made before it happens share the one pump."""
        if self._handle is None:
            self._turns = 0
            self._seen = self._queued()
            self._handle = self._loop.call_soon(self._turn)

    def flush(self) -> None:
        """Pump now if a pump is pending: admission must not count as queued what the
        pump would have dispatched (a full queue is judged after the pump)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._pump()

    def _turn(self) -> None:
        self._turns += 1
        queued = self._queued()
        grew, self._seen = queued > self._seen, queued
        if grew and self._turns < self._max_turns and self._idle() > 0:
            self._handle = self._loop.call_soon(self._turn)
            return
        self._handle = None
        self._pump()
