"""The SQLite store's group commit: the settlements of one event-loop turn share a
transaction; a priced reservation commits at once, with the settlements queued before it,
in arrival order; all or nothing (sqlite.py, sqlite_ops.py)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from podserve.gateway.budget import Grant
from podserve.gateway.store.base import Dimension
from podserve.gateway.store.sqlite import SqliteStore
from tests.gateway.test_stores import _hold, _settle


async def test_sqlite_settlements_share_one_transaction(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "gw.db")
    try:
        holds = [_hold(10, 100, limit_micro=1000) for _ in range(20)]
        before = store.transactions
        results = await asyncio.gather(*(store.reserve(h) for h in holds))
        assert store.transactions == before + 20  # a reservation does not wait for others
        # In arrival order: the first four fit.
        assert [isinstance(r, Grant) for r in results] == [True] * 4 + [False] * 16
        granted = [h for h, r in zip(holds, results, strict=True) if isinstance(r, Grant)]
        before = store.transactions
        settled = await asyncio.gather(*(store.settle(_settle(h, 10, 20)) for h in granted))
        assert settled == [True] * 4
        assert store.transactions == before + 1
        rows = await store.spend(Dimension.KEY)
        assert [(r.cost_micro, r.requests) for r in rows] == [(4 * 50, 4)]
    finally:
        await store.close()


async def test_sqlite_reservation_carries_the_queued_settlements(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "gw.db")
    try:
        first = _hold(10, 100, limit_micro=300)  # the budget holds one reservation of 210
        assert isinstance(await store.reserve(first), Grant)
        before = store.transactions
        settling = asyncio.create_task(store.settle(_settle(first, 10, 20)))
        second = asyncio.create_task(store.reserve(_hold(10, 100, limit_micro=300)))
        # The settlement is queued first; the reservation's transaction writes it, then
        # reserves against the budget it released (300 - 50 >= 210; 300 - 210 < 210).
        assert await second == Grant(100, 210, 110)
        assert await settling
        assert store.transactions == before + 1
    finally:
        await store.close()


async def test_sqlite_a_priced_reservation_is_committed_before_it_returns(
    tmp_path: Path,
) -> None:
    """Its request is forwarded in the same step, so it is durable first: another
    connection (a restarted gateway's, the CLI's) already sees it, lease and all."""
    import sqlite3

    path = tmp_path / "gw.db"
    store = SqliteStore(path)
    try:
        before = store.transactions
        assert await store.reserve(_hold(10, 100, limit_micro=300)) == Grant(100, 210, 110)
        assert store.transactions == before + 1
        with sqlite3.connect(path) as other:
            assert other.execute("SELECT count(*) FROM reservations").fetchone() == (1,)
    finally:
        await store.close()


async def test_sqlite_settlement_cancelled_before_its_batch_writes_nothing(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "gw.db")
    try:
        hold = _hold(10, 100, limit_micro=1000)
        assert isinstance(await store.reserve(hold), Grant)
        loop = asyncio.get_running_loop()
        task = asyncio.create_task(store.settle(_settle(hold, 10, 20)))
        # The task queues its settlement in this turn; the cancel runs before the batch
        # (the loop's ready queue is FIFO), as a caller's deadline firing would.
        loop.call_soon(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await store.spend(Dimension.KEY) == []
        assert await store.settle(_settle(hold, 10, 20))  # still open: settles now
    finally:
        await store.close()


async def test_sqlite_a_failed_batch_changes_nothing_in_memory_either(tmp_path: Path) -> None:
    """A batch is all or nothing, for the holds kept in memory too: a settlement in a
    transaction that rolls back leaves its reservation open, and a reservation in it
    holds nothing."""
    from podserve.gateway.store.base import Charge, StoreUnavailable

    store = SqliteStore(tmp_path / "gw.db")
    try:
        ok, clash = _hold(0, 0, limit_micro=None), _hold(0, 0, limit_micro=None)
        assert isinstance(await store.reserve(ok), Grant)
        assert isinstance(await store.reserve(clash), Grant)
        # A ledger row already carries `clash`'s id: its settlement's INSERT fails, and
        # with it the whole transaction it shares with `ok`'s settlement and a reservation.
        await store.charge(Charge(_settle(clash, 1, 1), ("key:k1",), clash.labels))
        late = _hold(0, 0, limit_micro=300, lease_s=-1.0)  # a limit: it writes a row
        # The reservation commits at once with the two settlements queued before it.
        results = await asyncio.gather(
            store.settle(_settle(ok, 0, 0)),
            store.settle(_settle(clash, 0, 0)),
            store.reserve(late),
            return_exceptions=True,
        )
        assert [type(r) for r in results] == [StoreUnavailable] * 3
        assert await store.settle(_settle(ok, 0, 0))  # still open: settles now
        assert await store.expire_leases(time.time()) == 0  # `late` (lease over) never held
        assert not await store.settle(_settle(late, 0, 0))
    finally:
        await store.close()
