"""A request counts in the period its budget charged, the one it was reserved in, also in
the ledger: `spend --period` and the rebuild of a flushed Redis select rows by their
reservation's time (`reserved_at`), not their settlement's. Real stores, an injected wall
clock; ledgers from before the column still open and report (by settlement time)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from podserve.cli.main import main
from podserve.config.gateway_config import BudgetPeriod, load_gateway_config
from podserve.core.clock import FakeClock
from podserve.gateway.accounting import Accounting
from podserve.gateway.budget import Grant, HoldPlan, Usage
from podserve.gateway.errors import OverLimit
from podserve.gateway.keys import KeyRecord
from podserve.gateway.money import Rate
from podserve.gateway.periods import span_at
from podserve.gateway.store.base import (
    Dimension,
    Hold,
    Labels,
    Outcome,
    ScopeSpec,
    Settlement,
    Store,
)
from podserve.gateway.store.sqlite import SqliteStore
from podserve.gateway.wire import Billable, Endpoint, billable
from tests.gateway.conftest import reset_shared_store
from tests.gateway.support import period_key


def _utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> float:
    return dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC).timestamp()


CONFIG = "prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}\ndefaults: {budgetWaitS: 0}"
LAST_SECOND = _utc(2026, 12, 31, 23, 59, 59)  # of 31 December, UTC
NEW_DAY = _utc(2027, 1, 1)
NOON = 12 * 3600.0


def _bill(max_tokens: int) -> Billable:  # 3 prompt token ids (exact): 3 + 2 x max_tokens micro
    return billable(
        {"model": "m", "prompt": [1, 2, 3], "max_tokens": max_tokens}, Endpoint.COMPLETIONS
    )


def _redis_store(redis_url: str, dsn: str, wall: FakeClock) -> Store:
    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    return RedisPostgresStore(redis_url, dsn, timeout_s=2.0, wall=wall.now_s)


async def _opened(kind: str, where: dict[str, str], wall: FakeClock) -> Store:
    if kind == "sqlite":
        return SqliteStore(where["path"], wall=wall.now_s)
    store = _redis_store(where["redis"], where["postgres"], wall)
    await store.setup()  # type: ignore[attr-defined]
    return store


async def _request(
    kind: str, where: dict[str, str], key: KeyRecord, wall: FakeClock, *, settle_after_s: float
) -> None:
    """One request of 3 + 40 tokens (83 micro-dollars), settled `settle_after_s` after it
    was reserved, through the gateway's accounting on the injected clock."""
    store = await _opened(kind, where, wall)
    try:
        if await store.find_key(key.key_hash) is None:
            await store.create_key(key)
        accounting = Accounting(load_gateway_config(CONFIG), store, wall=wall.now_s)
        admitted = await accounting.admit(key, _bill(40))
        wall.advance(settle_after_s)
        await accounting.settle(admitted, Usage(3, 40), Outcome.OK, "pool")
    finally:
        if kind != "sqlite":  # the store before this one kept the writer lock (for 5 s)
            import redis

            with redis.Redis.from_url(where["redis"]) as r:
                r.delete("gw:ledger:writer")
        await store.close()  # the Redis store drains its ledger into PostgreSQL


def _spend_cli(
    config: Path, at: float, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[tuple[str, int]]:
    """`podserve gateway spend --by key --period daily` run at wall time `at`."""
    with monkeypatch.context() as patched:
        patched.setattr(time, "time", lambda: at)
        spend = ["gateway", "spend", "--config", str(config), "--by", "key"]
        code = main([*spend, "--period", "daily", "--format", "json"])
    out = capsys.readouterr().out
    assert code == 0, out
    return [(row["key"], row["requests"]) for row in json.loads(out)]


@pytest.mark.parametrize("kind", ["sqlite", "redis-postgres"])
def test_spend_period_reports_a_request_in_the_day_it_was_reserved(
    kind: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if kind == "sqlite":
        where = {"path": str(tmp_path / "gw.db")}
        store_yaml = f"{{kind: sqlite, path: {where['path']}}}"
    else:
        where = {
            "redis": request.getfixturevalue("redis_url"),
            "postgres": request.getfixturevalue("postgres_dsn"),
        }
        reset_shared_store(where["redis"], where["postgres"])
        store_yaml = (
            f"{{kind: redis-postgres, redis: '{where['redis']}', postgres: '{where['postgres']}'}}"
        )
    config = tmp_path / "gateway.yaml"
    config.write_text(f"{CONFIG}\nstore: {store_yaml}\n")
    key, wall = period_key(), FakeClock(LAST_SECOND)
    # Reserved at 23:59:59 on 31 December, settled at 00:00:01 on 1 January: charged to
    # 31 December's budget (`key:<id>@2026-12-31`), so reported in that day.
    asyncio.run(_request(kind, where, key, wall, settle_after_s=2))
    assert _spend_cli(config, LAST_SECOND, monkeypatch, capsys) == [(key.key_id, 1)]
    assert _spend_cli(config, NEW_DAY + NOON, monkeypatch, capsys) == []
    # A request reserved on 1 January is that day's.
    asyncio.run(_request(kind, where, key, wall, settle_after_s=1))
    assert _spend_cli(config, NEW_DAY + NOON, monkeypatch, capsys) == [(key.key_id, 1)]


async def test_a_rebuilt_redis_counts_a_request_in_the_day_it_was_reserved(
    redis_url: str, postgres_dsn: str
) -> None:
    import redis

    reset_shared_store(redis_url, postgres_dsn)
    where = {"redis": redis_url, "postgres": postgres_dsn}
    key, wall = period_key(), FakeClock(LAST_SECOND)
    await _request("redis-postgres", where, key, wall, settle_after_s=2)  # 83 on 31 Dec
    await _request("redis-postgres", where, key, wall, settle_after_s=1)  # 83 on 1 Jan

    async def admits_after_rebuild(at: float, max_tokens: int) -> bool:
        """Flush Redis, rebuild it at wall time `at`, and try a request there."""
        with redis.Redis.from_url(redis_url) as r:
            r.flushall()
        clock = FakeClock(at)
        store = await _opened("redis-postgres", where, clock)
        try:
            accounting = Accounting(load_gateway_config(CONFIG), store, wall=clock.now_s)
            await accounting.admit(key, _bill(max_tokens))
            return True
        except OverLimit:
            return False
        finally:
            await store.close()

    # Each day's counter comes back with its own request alone (83 of 100: 17 left), not
    # with the one that settled in it (as 166: nothing left) or after it.
    for day in (LAST_SECOND - NOON, NEW_DAY + NOON):
        assert await admits_after_rebuild(day, 7)  # 3 + 14 = 17 fits exactly
        assert not await admits_after_rebuild(day, 8)  # 19 does not


def _old_sqlite_file(path: Path) -> None:
    """A store file from before ledger rows kept their reservation's time: one settled
    row (at noon on 31 December) and one reservation still open."""
    with sqlite3.connect(path) as db:
        db.executescript(
            """
            CREATE TABLE reservations (
              id TEXT PRIMARY KEY, scopes TEXT NOT NULL, amount INTEGER NOT NULL,
              tpm TEXT NOT NULL, tpm_tokens INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL,
              max_tokens INTEGER NOT NULL, lease_until REAL NOT NULL, key_id TEXT, team TEXT,
              namespace TEXT, model TEXT, request_id TEXT);
            CREATE TABLE ledger (
              reservation_id TEXT PRIMARY KEY, request_id TEXT, at REAL NOT NULL,
              key_id TEXT, team TEXT, namespace TEXT, model TEXT, upstream TEXT,
              prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
              cost_micro INTEGER NOT NULL, status TEXT NOT NULL);
            """
        )
        db.execute(
            "INSERT INTO ledger VALUES ('old', '', ?, 'k1', 't', 'ns', 'm', 'pool', 3, 40, 83, "
            "'ok')",
            (LAST_SECOND - NOON,),
        )
        db.execute(
            "INSERT INTO reservations VALUES ('open', '[\"key:k1\"]', 83, '[]', 0, 3, 40, ?, "
            "'k1', 't', 'ns', 'm', '')",
            (NEW_DAY + 600,),
        )


async def test_an_old_sqlite_ledger_opens_and_reports_by_settlement_time(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_sqlite_file(path)
    store = SqliteStore(path)
    try:
        # The open reservation from before the column settles on 1 January: no reservation
        # time is known, so it counts when it settled, as every old row does.
        settled = Settlement("open", Usage(3, 40), 83, "pool", Outcome.OK, NEW_DAY + 60)
        assert await store.settle(settled)
        # A request reserved on the upgraded file keeps its time: 31 December's.
        late = _hold_at(LAST_SECOND)
        assert isinstance(await store.reserve(late), Grant)
        assert await store.settle(
            Settlement(late.reservation_id, Usage(3, 40), 83, "pool", Outcome.OK, NEW_DAY + 1)
        )
        day = {
            when: [(r.group, r.requests) for r in await store.spend(Dimension.KEY, start)]
            for when, start in (
                ("31 Dec", _day_start(LAST_SECOND)),
                ("1 Jan", _day_start(NEW_DAY)),
            )
        }
        assert day == {"31 Dec": [("k1", 3)], "1 Jan": [("k1", 1)]}
    finally:
        await store.close()


def _hold_at(reserved_at: float) -> Hold:
    return Hold(
        "late",
        HoldPlan(3, 40, 40, Rate(1000, 2000)),
        (ScopeSpec("key:k1", None),),
        (),
        (),
        reserved_at + 600,
        Labels("k1", "t", "ns", "m"),
        reserved_at,
    )


def _day_start(wall_s: float) -> float:
    span = span_at(BudgetPeriod.DAILY, wall_s)
    assert span is not None
    return span.start_s


async def test_an_old_postgres_ledger_and_queued_rows_report_by_settlement_time(
    redis_url: str, postgres_dsn: str
) -> None:
    """A PostgreSQL ledger from before the column gets it (NULL), and a row queued in
    Redis by a replica from before it is written without it: both count when settled."""
    import psycopg
    import redis

    reset_shared_store(redis_url, postgres_dsn)
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE gateway_ledger (reservation_id TEXT PRIMARY KEY, request_id TEXT, "
            "at DOUBLE PRECISION NOT NULL, key_id TEXT, team TEXT, namespace TEXT, model TEXT, "
            "upstream TEXT, prompt_tokens BIGINT NOT NULL, completion_tokens BIGINT NOT NULL, "
            "cost_micro BIGINT NOT NULL, status TEXT NOT NULL)"
        )
        conn.execute(
            "INSERT INTO gateway_ledger VALUES ('old', '', %s, 'k1', 't', 'ns', 'm', 'pool', "
            "3, 40, 83, 'ok')",
            (LAST_SECOND - NOON,),
        )
    queued: dict[str, Any] = {
        "reservation_id": "queued",
        "request_id": "",
        "at": repr(NEW_DAY + 60),  # as the SETTLE script queued it: a string
        "key_id": "k1",
        "team": "t",
        "namespace": "ns",
        "model": "m",
        "upstream": "pool",
        "prompt_tokens": 3,
        "completion_tokens": 40,
        "cost_micro": 83,
        "status": "ok",
    }
    with redis.Redis.from_url(redis_url) as r:
        r.rpush("gw:ledger", json.dumps(queued))
    store = await _opened(
        "redis-postgres", {"redis": redis_url, "postgres": postgres_dsn}, FakeClock(NEW_DAY)
    )
    try:
        since_31 = await store.spend(Dimension.KEY, _day_start(LAST_SECOND))
        since_1 = await store.spend(Dimension.KEY, _day_start(NEW_DAY))
        assert [(r.group, r.cost_micro, r.requests) for r in since_31] == [("k1", 166, 2)]
        assert [(r.group, r.cost_micro, r.requests) for r in since_1] == [("k1", 83, 1)]
    finally:
        await store.close()
