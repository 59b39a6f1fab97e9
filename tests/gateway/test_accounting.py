"""Accounting in process over a real SQLite store: a request that does not fit only because
of outstanding holds waits for them to settle instead of taking a false 429."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from podserve.config.gateway_config import load_gateway_config
from podserve.core.clock import FakeClock
from podserve.gateway.accounting import Accounting
from podserve.gateway.budget import Usage
from podserve.gateway.errors import OverLimit
from podserve.gateway.keys import KeyRecord, key_id_of, new_key
from podserve.gateway.store.base import Hold, Outcome
from podserve.gateway.store.sqlite import SqliteStore
from podserve.gateway.wire import Billable, Endpoint, billable

CONFIG = """
prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}
defaults: {budgetWaitS: %s}
"""


async def _setup(tmp_path: Path, wait_s: float) -> tuple[Accounting, KeyRecord, FakeClock]:
    clock = FakeClock()
    store = SqliteStore(tmp_path / "gw.db")
    _, digest = new_key()
    key = KeyRecord(
        key_id_of(digest), digest, "t", "ns", (), 100, None, None, None, False, time.time()
    )
    await store.create_key(key)
    return (
        Accounting(load_gateway_config(CONFIG % wait_s), store, monotonic=clock.now_s),
        key,
        clock,
    )


def _bill(max_tokens: int) -> Billable:
    return billable({"model": "m", "prompt": "abc", "max_tokens": max_tokens}, Endpoint.COMPLETIONS)


async def test_a_request_waits_for_outstanding_holds(tmp_path: Path) -> None:
    accounting, key, _ = await _setup(tmp_path, 10)
    # 3 bytes + 4 special tokens + 2 * 40 = 87 of 100 held
    first = await accounting.admit(key, _bill(40))
    second = asyncio.ensure_future(accounting.admit(key, _bill(10)))  # needs 27
    # Still waiting while the hold is outstanding (the fake clock keeps its deadline away).
    done, _ = await asyncio.wait({second}, timeout=0.2)
    assert not done
    await accounting.settle(first, Usage(3, 5), Outcome.OK, "pool")  # real cost 13
    admitted = await second
    assert admitted.max_tokens == 10
    await accounting.settle(admitted, Usage(3, 10), Outcome.OK, "pool")
    await accounting.store.close()


async def test_without_waiting_the_same_request_is_refused(tmp_path: Path) -> None:
    accounting, key, _ = await _setup(tmp_path, 0)
    await accounting.admit(key, _bill(40))
    with pytest.raises(OverLimit) as refused:
        await accounting.admit(key, _bill(10))
    assert refused.value.reason == "budget"
    assert refused.value.retry_after_s == 1
    await accounting.store.close()


async def test_a_spent_budget_is_refused_at_once(tmp_path: Path) -> None:
    accounting, key, _ = await _setup(tmp_path, 10)
    done = await accounting.admit(key, _bill(40))
    await accounting.settle(done, Usage(3, 40), Outcome.OK, "pool")  # 83 spent
    with pytest.raises(OverLimit) as refused:  # no hold outstanding: nothing to wait for
        await accounting.admit(key, _bill(10))
    assert refused.value.retry_after_s == 3600
    await accounting.store.close()


async def test_team_and_namespace_limits_apply_to_their_keys(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "gw.db")
    config = load_gateway_config(
        "teams: {t: {budgetUsd: 0.000087}}\nnamespaces: {ns: {rpm: 2}}\n"
        "prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}\n"
        "defaults: {budgetWaitS: 0}\n"
    )
    accounting = Accounting(config, store)
    records = []
    for _ in range(2):
        _, digest = new_key()
        record = KeyRecord(
            key_id_of(digest), digest, "t", "ns", (), None, None, None, None, False, time.time()
        )
        await store.create_key(record)
        records.append(record)
    first = await accounting.admit(records[0], _bill(40))  # the team's 87 micro-dollars
    with pytest.raises(OverLimit) as team:
        await accounting.admit(records[1], _bill(1))  # another key of the same team
    assert team.value.reason == "budget"
    await accounting.settle(first, Usage(3, 0), Outcome.OK, "pool")
    await accounting.admit(records[1], _bill(1))  # the namespace's second request
    with pytest.raises(OverLimit) as ns:
        await accounting.admit(records[0], _bill(1))
    assert ns.value.reason == "rpm"
    await store.close()


async def test_reservation_ids_are_unique_and_ordered_by_time(tmp_path: Path) -> None:
    """Ordered ids append to the store's key indexes (Accounting._reservation_id); the
    random half keeps two ids of the same microsecond apart."""
    wall = [0.0]
    store = SqliteStore(tmp_path / "gw.db")
    config = load_gateway_config("defaults: {budgetWaitS: 0}\n")
    accounting = Accounting(config, store, wall=lambda: wall[0])
    _, digest = new_key()
    key = KeyRecord(key_id_of(digest), digest, "t", "ns", (), None, None, None, None, False, 0.0)
    oip = Billable("iris", Endpoint.V2, False, False, None, "", 1, (), 0)
    ids = []
    for now in (1_800_000_000.0, 1_800_000_000.0, 1_800_000_000.5, 1_800_000_060.0):
        wall[0] = now
        admission = await accounting.admit(key, oip)
        ids.append(admission.reservation_id)
        await accounting.settle(admission, Usage(0, 0), Outcome.OK, "pool")
    assert len(set(ids)) == 4
    assert ids[0][:16] == ids[1][:16]  # the same microsecond
    assert sorted(ids[1:]) == ids[1:]
    assert ids[0] < ids[2]
    assert all(len(i) == 32 and int(i, 16) >= 0 for i in ids)
    await store.close()


async def test_a_holds_rate_window_and_reserved_at_are_one_clock_reading(
    tmp_path: Path,
) -> None:
    """The ledger's `reserved_at` is how a window's admissions are counted afterwards
    (benchmarks/gateway.py, limits): it must name the window the hold counted in, even
    when the clock crosses a minute boundary during `admit`."""
    ticks = iter(1_800_000_059.999 + 0.002 * i for i in range(100))  # 0.002 s a reading
    store = SqliteStore(tmp_path / "gw.db")
    holds: list[Hold] = []
    reserve = store.reserve

    async def spy(hold: Hold) -> Any:
        holds.append(hold)
        return await reserve(hold)

    store.reserve = spy  # type: ignore[method-assign]  # the real store, observed
    config = load_gateway_config("defaults: {budgetWaitS: 0}\n")
    accounting = Accounting(config, store, wall=lambda: next(ticks))
    _, digest = new_key()
    key = KeyRecord(key_id_of(digest), digest, "t", "ns", (), None, 5, None, None, False, 0.0)
    oip = Billable("iris", Endpoint.V2, False, False, None, "", 1, (), 0)
    admission = await accounting.admit(key, oip)
    (hold,) = holds
    assert hold.reserved_at is not None
    assert hold.rpm[0].counter.rsplit(":", 1)[1] == str(int(hold.reserved_at // 60))
    await accounting.settle(admission, Usage(0, 0), Outcome.OK, "pool")
    await store.close()
