"""The ledger's one writer (gateway/store/ledger_writer.py), with real Redis and PostgreSQL:
a row leaves the Redis queue only once it is in PostgreSQL, whoever held the writer lock
when; a hung PostgreSQL call is given up inside the lock's TTL; a closing store (every
`keys`/`spend` CLI run) gives the lock back; setup says when Redis would lose the queue
on a restart; a rebuild of the budget counters that ends late writes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import psycopg
import pytest
import redis

from podserve.gateway.budget import Grant, HoldPlan, Usage
from podserve.gateway.money import Rate
from podserve.gateway.store.base import (
    Hold,
    Labels,
    Outcome,
    ScopeSpec,
    Settlement,
    StoreUnavailable,
)
from podserve.gateway.store.ledger_writer import (
    LOCK_TTL_MS,
    WRITE_TIMEOUT_S,
    Persistence,
    check_persistence,
)
from podserve.gateway.store.postgres_sql import INSERT_LEDGER, ledger_row
from podserve.gateway.store.redis_postgres import RedisPostgresStore
from tests.gateway.conftest import reset_shared_store

QUEUE, LOCK = "gw:ledger", "gw:ledger:writer"
RATE = Rate(1000, 2000)  # nano-dollars a token: 10 in + 20 out cost 50 micro-dollars


def _replica(
    redis_url: str, dsn: str, name: str, ledger_timeout_s: float = WRITE_TIMEOUT_S
) -> RedisPostgresStore:
    """A store as one gateway replica has it; its PostgreSQL session is named `name`
    (pg_stat_activity.application_name), so a test can find and stop its backend."""
    return RedisPostgresStore(
        redis_url,
        f"{dsn}?application_name={name}",
        timeout_s=2.0,
        ledger_timeout_s=ledger_timeout_s,
    )


async def _settle_some(store: RedisPostgresStore, count: int) -> list[str]:
    """Reserve and settle `count` priced requests: their rows are queued in Redis."""
    ids = []
    for _ in range(count):
        hold = Hold(
            reservation_id=uuid.uuid4().hex,
            plan=HoldPlan(10, 100, 100, RATE),
            scopes=(ScopeSpec("key:k1", None),),
            rpm=(),
            tpm=(),
            lease_until=time.time() + 600,
            labels=Labels("k1", "t", "ns", "m"),
        )
        assert isinstance(await store.reserve(hold), Grant)
        settled = Settlement(
            hold.reservation_id, Usage(10, 20), 50, "pool", Outcome.OK, time.time()
        )
        assert await store.settle(settled)
        ids.append(hold.reservation_id)
    return ids


async def _until(check: Callable[[], Awaitable[bool]], what: str, timeout_s: float = 20.0) -> None:
    """Poll a real condition without blocking the loop the stores run on."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(0.02)


@pytest.fixture
async def observer(
    redis_url: str, postgres_dsn: str
) -> AsyncIterator[psycopg.AsyncConnection[tuple[object, ...]]]:
    """A fresh store's state, and a PostgreSQL session of the test's own."""
    reset_shared_store(redis_url, postgres_dsn)
    async with await psycopg.AsyncConnection.connect(postgres_dsn, autocommit=True) as conn:
        yield conn


async def _backend(conn: psycopg.AsyncConnection[tuple[object, ...]], name: str) -> int:
    cur = await conn.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (name,)
    )
    [(pid,)] = await cur.fetchall()
    assert isinstance(pid, int)
    return pid


async def _waits_on_a_lock(conn: psycopg.AsyncConnection[tuple[object, ...]], name: str) -> bool:
    cur = await conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
        "AND wait_event_type = 'Lock'",
        (name,),
    )
    row = await cur.fetchone()
    return row is not None and row[0] == 1


async def _ledger_ids(conn: psycopg.AsyncConnection[tuple[object, ...]]) -> set[str]:
    cur = await conn.execute("SELECT reservation_id FROM gateway_ledger")
    return {str(r[0]) for r in await cur.fetchall()}


async def test_a_writer_whose_lock_ran_out_mid_batch_removes_no_row(
    redis_url: str,
    postgres_dsn: str,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Replica A's insert hangs past its lock (its backend stopped, as a partition would
    leave it); replica B takes the lock and drains the same rows; more rows are settled;
    A's insert then completes. A's trim must be refused: a plain LTRIM of its batch's
    length cut the newer rows, which nobody had inserted, off the queue (the probe: 315
    requests answered, 313 ledger rows)."""
    # A's call is allowed to take long, so that it completes and reaches its trim.
    a = _replica(redis_url, postgres_dsn, "ledger-a", ledger_timeout_s=60.0)
    b = _replica(redis_url, postgres_dsn, "ledger-b")
    await a.setup()
    await b.setup()
    r = redis.Redis.from_url(redis_url)
    stopped: int | None = None
    try:
        first = await _settle_some(a, 5)
        # An uncommitted row of the test's holds A's insert at its first row, where
        # PostgreSQL shows it waiting: A has read its batch and is inside its insert.
        blocker = await psycopg.AsyncConnection.connect(postgres_dsn)
        queued_head = r.lindex(QUEUE, 0)
        assert queued_head is not None
        head = ledger_row(json.loads(queued_head))
        await blocker.execute(INSERT_LEDGER, head)
        a_drain = asyncio.create_task(a.drain_ledger())
        await _until(lambda: _waits_on_a_lock(observer, "ledger-a"), "A inside its insert")
        stopped = await _backend(observer, "ledger-a")
        os.kill(stopped, signal.SIGSTOP)
        await blocker.commit()  # A's backend, stopped, holds no row B needs
        await blocker.close()
        r.delete(LOCK)  # A's lock runs out
        assert await b.drain_ledger() == 5  # B writes the same rows, and trims them
        later = await _settle_some(b, 3)  # more settlements meanwhile
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        with caplog.at_level(logging.WARNING, logger="podserve.gateway"):
            a_moved = await a_drain  # its insert completes (adding nothing)...
        assert r.llen(QUEUE) == 3  # ...and the later rows are still queued...
        assert await b.drain_ledger() == 3  # ...for the writer
        assert await _ledger_ids(observer) == set(first + later)
        assert a_moved == 0  # A's trim was refused, and said so
        assert "lost its lock" in caplog.text
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        r.close()
        await a.close()
        await b.close()


async def test_a_hung_postgresql_call_is_given_up_inside_the_lock(
    redis_url: str,
    postgres_dsn: str,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    """The writer's PostgreSQL backend stops answering (stopped: the connection stays
    open, as a partition or a half-open connection leaves it). The batch is given up at
    its 2 s bound, inside the lock's 5 s, with its rows still queued; without the bound
    the drain waited as long as the backend did."""
    store = _replica(redis_url, postgres_dsn, "ledger-hung")
    await store.setup()
    pid = await _backend(observer, "ledger-hung")
    try:
        ids = await _settle_some(store, 4)
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=f"took over {WRITE_TIMEOUT_S:g} s"):
            async with asyncio.timeout(3 * LOCK_TTL_MS / 1000):
                await store.drain_ledger()
        assert time.monotonic() - started < LOCK_TTL_MS / 1000
        os.kill(pid, signal.SIGCONT)
        with redis.Redis.from_url(redis_url) as r:
            assert r.llen(QUEUE) == 4
        assert await store.drain_ledger() == 4  # a new connection, the same writer
        assert await _ledger_ids(observer) == set(ids)
    finally:
        with contextlib.suppress(ProcessLookupError):  # it exited once its client cut it
            os.kill(pid, signal.SIGCONT)
        await store.close()


async def test_drains_in_one_process_take_turns(
    redis_url: str,
    postgres_dsn: str,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    """A replica drains from housekeeping and from a rebuild (or `spend`) at once: both
    are the same writer to the lock, so each would trim its own batch's length off the
    same head, cutting rows the other had not read. Concurrent drains and settlements
    lose no row."""
    store = _replica(redis_url, postgres_dsn, "ledger-turns")
    await store.setup()
    try:
        settled: list[str] = []
        for _ in range(10):
            batches = await asyncio.gather(
                _settle_some(store, 20),
                store.drain_ledger(),
                store.drain_ledger(),
                _settle_some(store, 20),
                store.drain_ledger(),
            )
            settled += [i for batch in batches if isinstance(batch, list) for i in batch]
        await store.drain_ledger()
        lost = set(settled) - await _ledger_ids(observer)
        assert not lost, f"{len(lost)} of {len(settled)} rows lost"
    finally:
        await store.close()


async def test_a_closed_store_gives_the_writer_lock_back(
    redis_url: str,
    postgres_dsn: str,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    """A `keys`/`spend` CLI run opens the store, drains the ledger and closes: it left
    the writer lock held for its 5 s TTL, and no replica drained meanwhile."""
    cli = _replica(redis_url, postgres_dsn, "ledger-cli")
    replica = _replica(redis_url, postgres_dsn, "ledger-replica")
    await cli.setup()
    await replica.setup()
    try:
        await cli.drain_ledger()
        await cli.close()
        with redis.Redis.from_url(redis_url) as r:
            assert r.get(LOCK) is None
        ids = await _settle_some(replica, 2)
        assert await replica.drain_ledger() == 2  # at once, not 5 s later
        assert await _ledger_ids(observer) == set(ids)
    finally:
        await replica.close()


async def test_a_closing_store_leaves_a_lock_another_writer_took(
    redis_url: str,
    postgres_dsn: str,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    """The release is a compare-and-delete: a lock that ran out and was taken by another
    replica is that replica's, and stays."""
    store = _replica(redis_url, postgres_dsn, "ledger-late")
    await store.setup()
    await store.drain_ledger()
    with redis.Redis.from_url(redis_url) as r:
        r.set(LOCK, "another-writer", px=LOCK_TTL_MS)
        await store.close()
        assert r.get(LOCK) == b"another-writer"


async def test_setup_warns_when_redis_does_not_persist_the_queue(
    redis_url: str,
    postgres_dsn: str,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The test Redis runs with `--save "" --appendonly no`: a restart would lose the
    queued rows and the rebuild would hand their spend out again."""
    store = _replica(redis_url, postgres_dsn, "ledger-persist")
    try:
        with caplog.at_level(logging.INFO, logger="podserve.gateway"):
            await store.setup()
        [record] = [r for r in caplog.records if "persistence" in r.getMessage()]
        assert record.levelno == logging.WARNING
        assert "appendonly yes" in record.getMessage()
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("args", "found"),
    [
        (["--appendonly", "yes"], Persistence.AOF),
        (["--save", "60 1"], Persistence.RDB),
        (["--rename-command", "CONFIG", ""], Persistence.UNKNOWN),
    ],
    ids=["aof", "rdb", "config-refused"],
)
async def test_persistence_as_each_redis_reports_it(
    args: list[str], found: Persistence, caplog: pytest.LogCaptureFixture
) -> None:
    """Quiet with AOF or RDB on; a managed Redis that refuses CONFIG gets an INFO line
    saying it could not be checked, not a warning."""
    import redis.asyncio as aioredis

    from tests.support.redis import redis_server as started

    with started(args=args) as server:
        client = aioredis.Redis.from_url(server.url)
        try:
            with caplog.at_level(logging.INFO, logger="podserve.gateway"):
                assert await check_persistence(client, QUEUE) is found
        finally:
            await client.aclose()
    said = [r for r in caplog.records if "persistence" in r.getMessage()]
    if found is Persistence.UNKNOWN:
        assert [r.levelno for r in said] == [logging.INFO]
        assert "could not be checked" in said[0].getMessage()
    else:
        assert said == []


async def test_persistence_on_redis_cluster_asks_the_queues_node(redis_cluster_url: str) -> None:
    from redis.asyncio.cluster import RedisCluster

    client = RedisCluster.from_url(redis_cluster_url)
    try:
        assert await check_persistence(client, "{gw}:ledger") is Persistence.NONE
    finally:
        await client.aclose()


async def test_a_rebuild_that_outlasted_its_lock_leaves_the_counters_alone(
    redis_url: str,
    postgres_dsn: str,
    observer: psycopg.AsyncConnection[tuple[object, ...]],
) -> None:
    """Redis restarted empty; this replica's rebuild of the committed counters is slow
    (its ledger query waits), its bootstrap lock runs out, another replica rebuilds and
    requests settle against the counters. The late rebuild must not write its older sums
    over them: that handed the spend settled since out again."""
    store = _replica(redis_url, postgres_dsn, "ledger-rebuild")
    await store.setup()
    r = redis.Redis.from_url(redis_url)
    try:
        await _settle_some(store, 2)  # 100 micro-dollars on key:k1, in PostgreSQL
        await store.drain_ledger()
        r.flushall()  # Redis restarted empty
        blocker = await psycopg.AsyncConnection.connect(postgres_dsn)
        await blocker.execute("LOCK TABLE gateway_ledger IN ACCESS EXCLUSIVE MODE")
        rebuilding = asyncio.create_task(_settle_some(store, 1))  # finds no counters
        await _until(lambda: _waits_on_a_lock(observer, "ledger-rebuild"), "its ledger query")
        # Another replica rebuilt (100), and 50 more were settled since: 150.
        r.hset("gw:scope:key:k1", "c", 150)
        r.set("gw:init", "1")
        await blocker.rollback()
        await blocker.close()
        await rebuilding  # reserved and settled against the live counters: 200
        assert r.hget("gw:scope:key:k1", "c") == b"200"
    finally:
        r.close()
        await store.close()
