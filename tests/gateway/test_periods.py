"""Budget periods: pure UTC spans, then accounting over both real stores with an injected
wall clock (a spent daily budget is refused until midnight, with Retry-After saying so, and
admits again after it), the rebuild of a flushed Redis, and an old SQLite file upgraded."""

from __future__ import annotations

import datetime as dt
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from podserve.config.gateway_config import BudgetPeriod, load_gateway_config
from podserve.core.clock import FakeClock
from podserve.gateway.accounting import Accounting
from podserve.gateway.budget import Usage
from podserve.gateway.errors import OverLimit
from podserve.gateway.key_limits import key_limits
from podserve.gateway.keys import KeyRecord
from podserve.gateway.periods import span_at
from podserve.gateway.store.base import Outcome, ScopeSpec, Store
from podserve.gateway.store.sqlite import SqliteStore
from podserve.gateway.wire import Billable, Endpoint, billable
from tests.gateway.conftest import reset_shared_store
from tests.gateway.support import period_key


def _utc(year: int, month: int, day: int, *hms: int) -> float:
    hour, minute, second = (*hms, 0, 0, 0)[:3]
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC).timestamp()


@pytest.mark.parametrize(
    ("period", "at", "label", "start", "end"),
    [
        (
            BudgetPeriod.DAILY,
            (2026, 12, 31, 23, 59, 59),
            "2026-12-31",
            (2026, 12, 31),
            (2027, 1, 1),
        ),
        (BudgetPeriod.MONTHLY, (2026, 12, 31, 23, 59), "2026-12", (2026, 12, 1), (2027, 1, 1)),
        (BudgetPeriod.MONTHLY, (2028, 2, 29, 12), "2028-02", (2028, 2, 1), (2028, 3, 1)),
        # ISO week 53 of 2026 runs Monday 28 December to Sunday 3 January
        (BudgetPeriod.WEEKLY, (2027, 1, 3, 22), "2026-W53", (2026, 12, 28), (2027, 1, 4)),
        (BudgetPeriod.WEEKLY, (2027, 1, 4, 0), "2027-W01", (2027, 1, 4), (2027, 1, 11)),
    ],
)
def test_spans_are_utc_calendar_periods(
    period: BudgetPeriod,
    at: tuple[int, ...],
    label: str,
    start: tuple[int, ...],
    end: tuple[int, ...],
) -> None:
    span = span_at(period, _utc(*at))
    assert span is not None
    assert (span.label, span.start_s, span.end_s) == (label, _utc(*start), _utc(*end))


CONFIG = """
prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}
defaults: {budgetWaitS: 0}
teams: {monthly: {budgetUsd: 0.0005, budgetPeriod: monthly}}
"""
# 23:59:30 UTC: the day ends in 30 s, the month (December) in 30 s too
BEFORE_MIDNIGHT = _utc(2026, 12, 31, 23, 59, 30)


def test_a_periodic_scope_is_named_for_its_period_and_knows_when_it_refills() -> None:
    assert span_at(BudgetPeriod.LIFETIME, time.time()) is None
    key = period_key(key_id="k1")
    config = load_gateway_config(CONFIG)
    scopes = key_limits(key, config).scopes_at(BEFORE_MIDNIGHT)
    assert scopes == (
        ScopeSpec("key:k1@2026-12-31", 100, 30.0),  # the day ends in 30 s
        ScopeSpec("team:t", None),  # a team with no budget in the config: lifetime
        ScopeSpec("namespace:ns", None),
    )


@pytest.fixture(params=["sqlite", "redis-postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        found: Store = SqliteStore(tmp_path / "gw.db")
    else:
        from podserve.gateway.store.redis_postgres import RedisPostgresStore

        redis_url = request.getfixturevalue("redis_url")
        dsn = request.getfixturevalue("postgres_dsn")
        reset_shared_store(redis_url, dsn)
        shared = RedisPostgresStore(redis_url, dsn, timeout_s=2.0)
        await shared.setup()
        found = shared
    yield found
    await found.close()


async def _key(store: Store, period: BudgetPeriod, team: str = "t") -> KeyRecord:
    key: KeyRecord = period_key(period, team=team, created_at=time.time())
    await store.create_key(key)
    return key


def _bill(max_tokens: int) -> Billable:  # 3 prompt token ids, counted exactly
    return billable(
        {"model": "m", "prompt": [1, 2, 3], "max_tokens": max_tokens}, Endpoint.COMPLETIONS
    )


async def test_a_spent_daily_budget_comes_back_at_midnight(store: Store) -> None:
    wall = FakeClock(BEFORE_MIDNIGHT)
    accounting = Accounting(load_gateway_config(CONFIG), store, wall=wall.now_s)
    key = await _key(store, BudgetPeriod.DAILY)
    first = await accounting.admit(key, _bill(40))  # 3 + 2 x 40 = 83 of 100
    await accounting.settle(first, Usage(3, 40), Outcome.OK, "pool")
    with pytest.raises(OverLimit) as refused:
        await accounting.admit(key, _bill(10))  # needs 23: 17 left today
    assert refused.value.reason == "budget"
    assert refused.value.retry_after_s == 30  # the seconds until the day ends
    wall.advance(31)  # 1 January, 00:00:01 UTC
    again = await accounting.admit(key, _bill(40))  # a new day: 100 again
    assert again.max_tokens == 40
    await accounting.settle(again, Usage(3, 40), Outcome.OK, "pool")


async def test_a_hold_made_before_the_boundary_settles_in_its_own_period(store: Store) -> None:
    wall = FakeClock(BEFORE_MIDNIGHT)
    accounting = Accounting(load_gateway_config(CONFIG), store, wall=wall.now_s)
    key = await _key(store, BudgetPeriod.DAILY)
    late = await accounting.admit(key, _bill(40))  # 83 held on 31 December
    wall.advance(60)
    # 1 January: the new day's budget is whole, whatever the old day's hold settles to
    fresh = await accounting.admit(key, _bill(40))
    await accounting.settle(late, Usage(3, 40), Outcome.OK, "pool")
    await accounting.settle(fresh, Usage(3, 5), Outcome.OK, "pool")  # 13 of today's 100
    with pytest.raises(OverLimit):
        await accounting.admit(key, _bill(44))  # 91 > the 87 left today


async def test_a_team_budget_per_month_limits_every_key_of_the_team(store: Store) -> None:
    wall = FakeClock(BEFORE_MIDNIGHT)
    accounting = Accounting(load_gateway_config(CONFIG), store, wall=wall.now_s)
    one = await _key(store, BudgetPeriod.LIFETIME, team="monthly")
    two = await _key(store, BudgetPeriod.LIFETIME, team="monthly")
    a = await accounting.admit(one, _bill(40))  # 83 of the team's 500
    await accounting.settle(a, Usage(3, 40), Outcome.OK, "pool")
    # the keys' own lifetime budgets (100 each) are not what stops these: the team's is
    for key in (two, two):
        admitted = await accounting.admit(key, _bill(20))  # 43
        await accounting.settle(admitted, Usage(3, 20), Outcome.OK, "pool")
    extra = [await _key(store, BudgetPeriod.LIFETIME, team="monthly") for _ in range(4)]
    for key in extra[:3]:
        admitted = await accounting.admit(key, _bill(40))  # 83 each: 418 in all
        await accounting.settle(admitted, Usage(3, 40), Outcome.OK, "pool")
    with pytest.raises(OverLimit) as refused:
        await accounting.admit(extra[3], _bill(40))  # 83 > the team's 82 left
    assert refused.value.retry_after_s == 30  # December ends in 30 s
    wall.advance(31)
    await accounting.admit(extra[3], _bill(40))  # January: the team's 500 again


async def test_a_rebuilt_redis_keeps_the_current_periods_spend(
    redis_url: str, postgres_dsn: str
) -> None:
    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    reset_shared_store(redis_url, postgres_dsn)
    store = RedisPostgresStore(redis_url, postgres_dsn, timeout_s=2.0)
    await store.setup()
    accounting = Accounting(load_gateway_config(CONFIG), store)  # today, on the wall clock
    key = await _key(store, BudgetPeriod.MONTHLY)
    spent = await accounting.admit(key, _bill(40))
    await accounting.settle(spent, Usage(3, 40), Outcome.OK, "pool")  # 83 this month
    await store.drain_ledger()
    await store.close()
    import redis

    with redis.Redis.from_url(redis_url) as r:
        r.flushall()  # Redis restarted empty: counters come back from the ledger
    rebuilt = RedisPostgresStore(redis_url, postgres_dsn, timeout_s=2.0)
    await rebuilt.setup()
    accounting = Accounting(load_gateway_config(CONFIG), rebuilt)
    with pytest.raises(OverLimit) as refused:
        await accounting.admit(key, _bill(10))  # 23 > the 17 left this month
    assert refused.value.reason == "budget"
    admitted = await accounting.admit(key, _bill(7))  # 17 fits exactly
    await accounting.settle(admitted, Usage(3, 7), Outcome.OK, "pool")
    await rebuilt.close()


def test_a_store_from_before_budget_periods_opens_with_lifetime_keys(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as db:  # the keys table as it was before the column
        db.execute(
            "CREATE TABLE keys (key_id TEXT PRIMARY KEY, key_hash TEXT UNIQUE NOT NULL, "
            "team TEXT NOT NULL, namespace TEXT NOT NULL, models TEXT NOT NULL, "
            "budget_micro INTEGER, rpm INTEGER, tpm INTEGER, expires_at REAL, "
            "revoked INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL)"
        )
        db.execute(
            "INSERT INTO keys VALUES ('k1', 'h1', 't', 'ns', '[]', 5, NULL, NULL, NULL, 0, 1.0)"
        )
    import asyncio

    async def read() -> KeyRecord | None:
        store = SqliteStore(path)
        try:
            return await store.find_key("h1")
        finally:
            await store.close()

    found = asyncio.run(read())
    assert found is not None
    assert (found.key_id, found.budget_micro, found.budget_period) == ("k1", 5, "lifetime")
