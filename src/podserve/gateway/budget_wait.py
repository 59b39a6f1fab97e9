"""Waiting for budget (`defaults.budgetWaitS`): a request refused only because other holds
are outstanding (they settle at or below their amount) waits for one to settle, then tries
its reservation again.

Each waiter used to retry every 25 ms on the event loop whatever happened: 300 waiters
cost about 30% of a CPU and held `/healthz` up to 115 ms (a probe, p10_wait_spin). Now a
waiter sleeps until the first of:

- this replica settles or releases a hold on the scope that refused it (`wake`: the
  settlement that can make room is usually this replica's own);
- its poll comes round: settlements on other replicas, and lease expiries, are not seen
  here, so it also retries after 25 ms, then 50, 100, … at most 1 s apart (`poll_delays`);
- its client disconnects: it stops waiting, and is charged nothing (it holds nothing).

A request that could never fit, however the holds settle (its least hold is more than
limit - committed), does not wait at all: `budget.budget_refusal`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator

POLL_FIRST_S = 0.025
POLL_MAX_S = 1.0


def poll_delays(first_s: float = POLL_FIRST_S, most_s: float = POLL_MAX_S) -> Iterator[float]:
    """A waiter's polls: doubling from `first_s` to `most_s`, then every `most_s`."""
    delay = first_s
    while True:
        yield delay
        delay = min(most_s, delay * 2)


def _wake(woken: asyncio.Future[None]) -> None:
    if not woken.done():
        woken.set_result(None)


class Waiters:
    """Requests waiting for budget, by the scope (or tpm window) that refused them."""

    __slots__ = ("_by_scope",)

    def __init__(self) -> None:
        self._by_scope: dict[str, set[asyncio.Future[None]]] = {}

    def __len__(self) -> int:
        return sum(len(waiting) for waiting in self._by_scope.values())

    async def wait(
        self, scope: str, delay_s: float, gone: asyncio.Future[None] | None = None
    ) -> bool:
        """Until `scope` is woken, `delay_s` passes or `gone` (the client left) completes;
        False when the client left."""
        loop = asyncio.get_running_loop()
        woken: asyncio.Future[None] = loop.create_future()
        waiting = self._by_scope.setdefault(scope, set())
        waiting.add(woken)
        timer = loop.call_later(delay_s, _wake, woken)
        try:
            if gone is None:
                await woken
            else:
                await asyncio.wait((woken, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            timer.cancel()
            waiting.discard(woken)
            if not waiting and self._by_scope.get(scope) is waiting:
                del self._by_scope[scope]
        return gone is None or not gone.done() or gone.cancelled()

    def wake(self, scopes: Iterable[str]) -> None:
        """A hold on these scopes (or tpm windows) settled or was released here."""
        for scope in scopes:
            for woken in self._by_scope.get(scope, ()):
                _wake(woken)

    def wake_all(self) -> None:
        """Holds were released outside this replica's settlements (a lease sweep)."""
        for waiting in self._by_scope.values():
            for woken in waiting:
                _wake(woken)
