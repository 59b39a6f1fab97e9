"""How the gateway calls a networked store (Redis + PostgreSQL): under a deadline, and not
at all while the store is known to be down.

**Deadline.** A call gets `storeTimeoutMs` of store time (or what is left of a request's
deadline). The refusal goes out at the deadline, not when the store client has cleaned
up: the call runs as its own task, and one that misses the deadline is left to finish in
the background (the clients' own socket timeouts end it) while the request is refused.
Under `asyncio.timeout` the request waited for the cancelled call to unwind (redis-py
disconnecting and returning the connection to its pool, redis/asyncio/client.py
execute_command), and the hung-store benchmark saw refusals at 51-67 ms against a 40 ms
deadline. `late` gets a result that arrives after the refusal (a reservation the store
made after all: released).

**Breaker.** Without one, every request during an outage waited its whole deadline and
left a call behind on a hung connection, so an outage at a few thousand requests a
second held a hundred requests and their calls at once, each for 40 ms, to learn what
the previous request had learned. After `storeBreaker.failures` (3) calls in a row fail
(refused connection, an error, a missed deadline), spanning at least
`storeBreaker.minSpanS` (0.25 s; so a brownout, slow calls between good ones, is not
turned into refusing everything: at a high request rate a few slow calls in a row come
easily), the store is taken for down for `storeBreaker.openS` (1 s): admission calls
are refused at once, 503 with a `Retry-After` of the open period's rest, rounded up, as
before, or admitted by `LocalBudgets` with fail-open on.
Then one admission call is let through as a probe; its outcome closes the breaker or
opens it again (`gateway/breaker.py`, the shape of Envoy's outlier detection).
Settlements and recorded charges are never refused by it: they run after the client has
its answer, and refusing one would leave its hold to the lease, which charges it in
full. Their outcomes count like any call's, so a settlement that succeeds closes the
breaker.

The SQLite store is in process: it cannot hang on a network, so it has no deadline.
It has the breaker: a file another writer holds locked (a backup, a `sqlite3` shell)
fails each transaction after SQLite's busy timeout (`storeTimeoutMs`, waited on the
event loop's thread), and without the breaker every request would wait it out in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from podserve.gateway.breaker import Breaker, BreakerState
from podserve.gateway.errors import StoreDown
from podserve.gateway.store.base import StoreUnavailable

T = TypeVar("T")
log = logging.getLogger("podserve.gateway")

FAILURES = 3  # the config's defaults (storeBreaker)
OPEN_S = 1.0
MIN_SPAN_S = 0.25


def _down(retry_after_s: int = 1) -> StoreDown:
    return StoreDown("the gateway's store is unavailable", retry_after_s=retry_after_s)


class StoreCalls:
    def __init__(
        self,
        timeout_s: float,
        in_process: bool,
        monotonic: Callable[[], float],
        failures: int = FAILURES,
        open_s: float = OPEN_S,
        min_span_s: float = MIN_SPAN_S,
    ) -> None:
        self._timeout_s = timeout_s
        self._in_process = in_process
        self._mono = monotonic
        self.breaker = Breaker(failures, open_s, min_span_s)
        # Calls that missed their deadline and were left to finish (their `late`).
        self.background: set[asyncio.Future[Any]] = set()

    def deadline(self) -> float:
        """A request's store deadline, on the monotonic clock: the key lookup and the
        reservation share it, so a slow answer to one does not restart the clock."""
        return self._mono() + self._timeout_s

    async def call(
        self,
        op: Callable[[], Awaitable[T]],
        deadline: float | None = None,
        late: Callable[[T], None] | None = None,
        refusable: bool = True,
        unknown: Callable[[], None] | None = None,
    ) -> T:
        """`op()` under the deadline (`deadline`, else `storeTimeoutMs` from now); not made
        at all, StoreDown at once, when `refusable` and the breaker is open. A call that
        missed the deadline and later answers goes to `late`; one that later fails
        (the client's socket timeout on a hung Redis) goes to `unknown`: its command may
        still run once the store resumes."""
        now = self._mono()
        if refusable:
            if not self.breaker.allows(now):
                # A client told to come back in 1 s while the breaker stays open for
                # `openS` = 10 would be refused ten times over.
                raise _down(max(1, math.ceil(self.breaker.wait_s(now))))
            self.breaker.on_attempt(now)
        if self._in_process:
            try:
                result = await op()
            except StoreUnavailable as exc:
                self._record(False)
                raise _down() from exc
            self._record(True)
            return result
        left = (self.deadline() if deadline is None else deadline) - now
        task = asyncio.ensure_future(op())
        # The breaker hears the call's own outcome, whoever still waits for it: a request
        # cancelled while its call is the probe must not leave the probe open for ever.
        task.add_done_callback(self._completed)
        try:
            if left > 0:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(left):
                        return await asyncio.shield(task)
            if task.done() and not task.cancelled():
                return task.result()
        except (StoreUnavailable, TimeoutError) as exc:
            raise _down() from exc
        # Missed the deadline: a failure now (an answer that comes later counts then);
        # refuse; the call finishes (or is cancelled) behind us.
        self._record(False)
        if late is None:
            task.cancel()
        else:
            self.background.add(task)
            task.add_done_callback(self.background.discard)
        task.add_done_callback(lambda done: _consume(done, late, unknown))
        missed = StoreUnavailable("the store did not answer before the deadline")
        raise _down() from missed

    def _completed(self, task: asyncio.Future[Any]) -> None:
        if task.cancelled():  # by the deadline (counted there) or at shutdown
            return
        error = task.exception()
        # An error the store itself answered with (another replica rebuilding its
        # counters) says the store is up: it counts as an answer, and ends a probe.
        self._record(error is None or not getattr(error, "store_down", True))

    def _record(self, ok: bool) -> None:
        was = self.breaker.state
        if ok:
            self.breaker.on_success()
        else:
            self.breaker.on_failure(self._mono())
        now = self.breaker.state
        if now is BreakerState.OPEN and was is not BreakerState.OPEN:
            log.warning(
                "store taken for down: admission calls refused at once",
                extra={
                    "failures_in_a_row": self.breaker.failures,
                    "open_s": self.breaker.open_s,
                },
            )
        elif now is BreakerState.CLOSED and was is not BreakerState.CLOSED:
            log.info("store answering again")


def _consume(
    task: asyncio.Future[T],
    late: Callable[[T], None] | None,
    unknown: Callable[[], None] | None,
) -> None:
    """A store call that missed its deadline ended: hand a result to `late`, or say that
    its outcome is unknown; retrieve an error so asyncio does not log it as never
    retrieved."""
    if task.cancelled():
        return
    if task.exception() is not None:
        if unknown is not None:
            unknown()
        return
    if late is not None:
        late(task.result())
