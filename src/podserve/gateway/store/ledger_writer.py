"""The ledger's one writer: moves the rows that settlements queue in Redis (the `ledger`
list) into PostgreSQL's `gateway_ledger`, in batches, from whichever replica holds the
writer lock (`ledger:writer`, LOCK_TTL_MS, kept while it drains).

A row leaves the queue only after its batch committed, and never a row that is not in
PostgreSQL: a batch is LRANGEd, inserted (`ON CONFLICT (reservation_id) DO NOTHING`, so
a batch inserted twice adds nothing), then cut off the head of the list by a script that
does so only while the lock is still this writer's (lua.WRITER_TRIM). Two ways the plain
LTRIM that stood there lost rows:

- the lock ran out while this writer's PostgreSQL call hung (a partition, a stopped
  backend): another replica took it and drained the same rows and the ones after them,
  and the late LTRIM then cut as many rows that nobody had inserted (the probe: 315
  requests answered, 313 ledger rows). Now that trim is refused and logged;
- two drains in one process (housekeeping, and a rebuild or `spend`) share the writer's
  id, so the lock cannot tell them apart: they take turns (`_turn`).

A batch's PostgreSQL call is given up after WRITE_TIMEOUT_S, well inside the lock's TTL,
by shutting its connection's socket down (`insert_batch`); inside PostgreSQL the same
bound ends a statement stuck on a lock, and an open transaction whose client vanished
(which would block the next writer's insert of the same rows) ends soon after.

The queue lives only in Redis until drained: a Redis restarted without persistence loses
the rows settled since the last drain (all of them during a PostgreSQL outage), and the
budget rebuild from PostgreSQL then hands their spend out again. `check_persistence` says
so at setup when the Redis has neither AOF nor RDB on (docs/gateway.md, "State").
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
import logging
import os
import socket
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import redis.asyncio as aioredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from podserve.gateway.store.base import StoreUnavailable
from podserve.gateway.store.lua import WRITER_ACQUIRE, WRITER_RELEASE, WRITER_TRIM
from podserve.gateway.store.postgres_sql import INSERT_LEDGER, ledger_row

log = logging.getLogger("podserve.gateway")

REDIS_ERRORS = (redis.exceptions.RedisError, OSError)
# A crashed writer's rows wait this long for the next one; housekeeping drains every
# 0.2 s, so a live writer keeps the lock.
LOCK_TTL_MS = 5000
# 500 rows commit in milliseconds; 2 s leaves a loaded PostgreSQL room and the lock
# (renewed at each trim) 3 s for the Redis calls around it.
WRITE_TIMEOUT_S = 2.0
BATCH = 500

Insert = Callable[[list[tuple[Any, ...]]], Awaitable[None]]


class LedgerWriter:
    """Drains the queue into PostgreSQL through `insert` (one batch, one transaction)
    while this writer holds the lock."""

    def __init__(
        self,
        client: aioredis.Redis | RedisCluster,
        queue_key: str,
        lock_key: str,
        insert: Insert,
        *,
        lock_ttl_ms: int = LOCK_TTL_MS,
        batch: int = BATCH,
    ) -> None:
        self._redis = client
        self._queue = queue_key
        self._lock = lock_key
        self._insert = insert
        self._ttl_ms = lock_ttl_ms
        self._batch = batch
        self._id = uuid.uuid4().hex
        self._acquire = client.register_script(WRITER_ACQUIRE)
        self._trim = client.register_script(WRITER_TRIM)
        self._release = client.register_script(WRITER_RELEASE)
        self._turn = asyncio.Lock()

    async def drain(self) -> int:
        """Move the queued rows into PostgreSQL if this writer holds (or gets) the lock;
        the number moved. Raises StoreUnavailable when Redis or PostgreSQL fails."""
        async with self._turn:
            try:
                if not await self._acquire(keys=[self._lock], args=[self._id, self._ttl_ms]):
                    return 0
                moved = 0
                while True:
                    raw = await self._redis.lrange(self._queue, 0, self._batch - 1)
                    if not raw:
                        return moved
                    await self._insert([ledger_row(json.loads(r)) for r in raw])
                    trimmed = await self._trim(
                        keys=[self._lock, self._queue], args=[self._id, len(raw), self._ttl_ms]
                    )
                    if not trimmed:
                        log.warning(
                            "ledger writer lost its lock during a batch of %d rows (its "
                            "PostgreSQL call outlasted the lock's %d ms): the rows stay "
                            "queued for the next writer, whose insert skips those written",
                            len(raw),
                            self._ttl_ms,
                        )
                        return moved
                    moved += len(raw)
            except REDIS_ERRORS as exc:
                raise StoreUnavailable(f"redis: {exc}") from exc

    async def release(self) -> None:
        """Give the lock back if it is still this writer's, so the next writer need not
        wait out its TTL (a CLI run otherwise left every replica's rows queued 5 s)."""
        async with self._turn:
            try:
                await self._release(keys=[self._lock], args=[self._id])
            except REDIS_ERRORS as exc:
                raise StoreUnavailable(f"redis: {exc}") from exc


async def insert_batch(
    conn: psycopg.AsyncConnection[Any], rows: list[tuple[Any, ...]], timeout_s: float
) -> None:
    """INSERT one batch in one transaction, or raise StoreUnavailable (the connection
    closed) once it has taken `timeout_s`."""
    cut = _Cut(conn)
    timer = asyncio.get_running_loop().call_later(timeout_s, cut)
    limit_ms = int(timeout_s * 1000)
    try:
        async with conn.transaction(), conn.cursor() as cur:
            # Server-side bounds for what the client-side cut cannot end: a statement
            # waiting on a lock does not notice its client left, and a transaction whose
            # client vanished without a FIN would hold its rows' keys, on which the next
            # writer's insert of the same rows waits.
            await cur.execute(
                f"SET LOCAL statement_timeout = {limit_ms}; "
                f"SET LOCAL idle_in_transaction_session_timeout = {limit_ms}".encode()
            )
            await cur.executemany(INSERT_LEDGER, rows)
    except psycopg.OperationalError as exc:
        await conn.close()
        if cut.fired:
            raise StoreUnavailable(
                f"postgres: a ledger batch took over {timeout_s:g} s; connection closed"
            ) from exc
        raise StoreUnavailable(f"postgres: {exc}") from exc
    finally:
        timer.cancel()


class _Cut:
    """Shuts a connection's socket down under libpq, so its pending read ends at once
    ("server closed the connection"). Cancelling the coroutine instead (asyncio.timeout)
    makes psycopg ask the server to cancel the query and wait up to 5 s more for it to
    end, 5 s more again to send that cancel through a partition: a 1 s timeout on a
    stopped backend returned after 6.0 s (measured), past the writer lock's TTL."""

    __slots__ = ("_conn", "fired")

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self.fired = False

    def __call__(self) -> None:
        self.fired = True
        # A duplicate of libpq's descriptor: shutdown acts on the connection itself, and
        # closing the duplicate leaves libpq's own to psycopg.
        with (
            contextlib.suppress(OSError, psycopg.Error),
            socket.socket(fileno=os.dup(self._conn.pgconn.socket)) as sock,
        ):
            sock.shutdown(socket.SHUT_RDWR)


class Persistence(enum.Enum):
    AOF = "aof"
    RDB = "rdb"
    NONE = "none"
    UNKNOWN = "unknown"  # CONFIG refused (managed Redis often renames or forbids it)


async def check_persistence(client: aioredis.Redis | RedisCluster, key: str) -> Persistence:
    """How the Redis node holding `key` (the queue) persists, logged when a restart would
    lose queued ledger rows: a WARNING with neither AOF nor RDB on, INFO when it cannot
    be asked."""
    try:
        target: dict[str, Any] = {}
        if isinstance(client, RedisCluster):
            await client.initialize()
            target["target_nodes"] = client.get_node_from_key(key)
        aof = _config_value(await client.execute_command("CONFIG", "GET", "appendonly", **target))
        save = _config_value(await client.execute_command("CONFIG", "GET", "save", **target))
    except REDIS_ERRORS as exc:
        log.info(
            "Redis persistence could not be checked (CONFIG GET: %s): if it runs without "
            "AOF or RDB, a restart loses the settled ledger rows not yet in PostgreSQL "
            "and the budget rebuild hands their spend out again (docs/gateway.md, State)",
            exc,
        )
        return Persistence.UNKNOWN
    if aof == "yes":
        return Persistence.AOF
    if save.strip():
        return Persistence.RDB
    log.warning(
        'Redis runs without persistence (appendonly no, save ""): a restart loses the '
        "settled ledger rows not yet drained into PostgreSQL (those of the last 0.2 s; all "
        "of a PostgreSQL outage), and the budget rebuild from PostgreSQL then hands their "
        "spend out again. Run it with appendonly yes, appendfsync everysec "
        "(docs/gateway.md, State)"
    )
    return Persistence.NONE


def _config_value(reply: dict[Any, Any]) -> str:
    """The one value of a `CONFIG GET <name>` reply ({name: value}, bytes or str)."""
    [value] = reply.values()
    return value.decode() if isinstance(value, bytes) else str(value)
