"""The shared store for several replicas: Redis holds what must be atomic across them
(budget counters, reservations with leases, rate windows — Lua scripts in `lua.py`);
PostgreSQL holds what must last (keys, the spend ledger).

The ledger is append-only and written by one writer at a time: settlements push their row
onto a Redis list inside the same script that moves the money, and whichever replica holds
the `gw:ledger:writer` lock (`{gw}:ledger:writer` on Redis Cluster) drains it in batches
with `INSERT … ON CONFLICT DO NOTHING` (`ledger_writer`: a row leaves the list only once
it is in PostgreSQL, and only by the lock's holder).
No replica ever updates a shared row in PostgreSQL, so there is no hot row to deadlock on
(LiteLLM's per-request spend UPDATEs deadlock at 10+ replicas), and a crash between the
insert and the trim only replays rows the conflict clause ignores. Until drained, rows
live only in Redis: `setup` warns when that Redis does not persist them.

Redis is the authority for budgets; when it starts empty, the committed counters are
rebuilt from the ledger before the first reservation (`_bootstrap`), each request in the
period it was reserved in (the ledger row's `reserved_at`), as the live counters had it;
a rebuild that ends after another one did writes nothing (lua.REBUILD).

A hold of nothing (amount 0, no tokens in a tpm window: every OIP v2 request) has no
`res:` hash and no lease: the replica that made it keeps it in memory and settles it with
one RPUSH of its ledger row. A replica that crashes loses only such a hold's `expired`
ledger row of 0; why that is the whole trade is in `redis_unheld`.

Redis Cluster (`redisCluster: true`): a script may touch only keys of one hash slot
(redis.io/docs/latest/operate/oss_and_stack/reference/cluster-spec, "Hash tags"), and a
reservation touches its key's, team's and namespace's counters, its windows and the
lease set. Every key then starts with the hash tag `{gw}`, so all of them share one
slot: the gateway's state lives on one shard (a few keys per request; one shard serves
far more than the replicas send). Standalone Redis keeps the plain `gw:` names, so an
existing deployment's counters stay where they are.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from podserve.gateway.budget import Grant, Refusal
from podserve.gateway.keys import KeyRecord, as_found
from podserve.gateway.limits import WINDOW_S
from podserve.gateway.store import lua
from podserve.gateway.store.base import (
    Charge,
    Dimension,
    Hold,
    Settlement,
    SpendRow,
    StoreUnavailable,
)
from podserve.gateway.store.ledger_writer import (
    REDIS_ERRORS,
    WRITE_TIMEOUT_S,
    LedgerWriter,
    check_persistence,
    insert_batch,
)
from podserve.gateway.store.postgres_sql import (
    KEY_COLUMNS,
    SCHEMA,
    committed_query,
    connect_options,
    key_record,
    spend_query,
)
from podserve.gateway.store.redis_unheld import (
    Unheld,
    UnheldHolds,
    expired,
    holds_nothing,
    labels_json,
    ledger_json,
)


class _Rebuilding(StoreUnavailable):
    """Another replica holds the bootstrap lock: fail closed for now, or wait (setup).
    Redis answered: the store breaker counts it as the store up (store_calls.py)."""

    store_down = False


class RedisPostgresStore:
    def __init__(
        self,
        redis_url: str,
        postgres_dsn: str,
        timeout_s: float = 0.05,
        *,
        cluster: bool = False,
        wall: Callable[[], float] = time.time,
        ledger_timeout_s: float = WRITE_TIMEOUT_S,
    ) -> None:
        # Socket timeouts end a call to a store that stopped answering (the client's
        # default is none). The request itself is refused at its own deadline by the
        # caller (accounting._call), so these need not be as short: open_store gives them
        # at least 0.5 s, so a loaded but live Redis is not disconnected on every slow
        # reply, nor the gateway's startup failed by one.
        self._redis: aioredis.Redis | RedisCluster
        if cluster:
            # No retries at all: a script retried after a timeout may have run already, and
            # a second reserve of the same id would add its hold twice (the settlement takes
            # it back once). MOVED/ASK redirects are followed apart from this.
            self._redis = RedisCluster.from_url(
                redis_url,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry=Retry(NoBackoff(), 0),
            )
        else:
            self._redis = aioredis.Redis.from_url(
                redis_url,
                socket_timeout=timeout_s,
                socket_connect_timeout=timeout_s,
                retry_on_timeout=False,
            )
        self._k = "{gw}:" if cluster else "gw:"  # see the module docstring
        self._leases = self._k + "leases"
        self._ledger = self._k + "ledger"
        self._writer_lock = self._k + "ledger:writer"
        self._init = self._k + "init"
        self._dsn = postgres_dsn
        self._pg: psycopg.AsyncConnection[Any] | None = None
        self._pg_lock = asyncio.Lock()
        self._reserve = self._redis.register_script(lua.RESERVE)
        self._settle = self._redis.register_script(lua.SETTLE)
        self._expire = self._redis.register_script(lua.EXPIRE)
        self._charge = self._redis.register_script(lua.CHARGE)
        self._settle_unheld = self._redis.register_script(lua.SETTLE_UNHELD)
        self._rebuild = self._redis.register_script(lua.REBUILD)
        self._replica_id = uuid.uuid4().hex  # the bootstrap lock's value
        # How long one ledger batch may take in PostgreSQL (ledger_writer); keep it well
        # under the writer lock's TTL.
        self._ledger_timeout_s = ledger_timeout_s
        self._writer = LedgerWriter(
            self._redis, self._ledger, self._writer_lock, self._insert_ledger
        )
        self._wall = wall  # UTC wall seconds: the periods a rebuild fills, a hold's time
        self._unheld = UnheldHolds()  # this replica's holds of nothing (redis_unheld)

    # --- connections -----------------------------------------------------------------
    async def _conn(self) -> psycopg.AsyncConnection[Any]:
        if self._pg is None or self._pg.closed:
            try:
                self._pg = await psycopg.AsyncConnection.connect(
                    connect_options(self._dsn), autocommit=True, connect_timeout=2
                )
            except psycopg.Error as exc:
                raise StoreUnavailable(f"postgres: {exc}") from exc
        return self._pg

    async def _sql(self, query: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        async with self._pg_lock:
            conn = await self._conn()
            try:
                cur = await conn.execute(query.encode(), params)
                return await cur.fetchall() if cur.description is not None else []
            except psycopg.OperationalError as exc:
                await conn.close()
                raise StoreUnavailable(f"postgres: {exc}") from exc

    async def setup(self, wait_s: float = 15.0) -> None:
        """Create the tables, and rebuild Redis's committed counters if Redis is empty
        (or wait for the replica that is doing it); say if Redis would lose the queued
        ledger rows on a restart."""
        await self._sql(SCHEMA)
        deadline = asyncio.get_running_loop().time() + wait_s
        while True:
            try:
                await self._bootstrap()
                break
            except _Rebuilding:
                if asyncio.get_running_loop().time() > deadline:
                    raise
                await asyncio.sleep(0.05)  # polling another process's progress
        await check_persistence(self._redis, self._ledger)

    async def _bootstrap(self) -> None:
        try:
            if await self._redis.exists(self._init):
                return
            # One replica rebuilds; the others fail closed until it is done.
            lock = self._k + "bootstrap"
            if not await self._redis.set(lock, self._replica_id, nx=True, px=10_000):
                raise _Rebuilding("another replica is rebuilding the budget counters")
            await self.drain_ledger()
            rows = await self._sql(*committed_query(self._wall()))
            await self._rebuild(
                keys=[self._init, *[f"{self._k}scope:{scope}" for scope, _ in rows]],
                args=[int(total) for _, total in rows],
            )
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc

    # --- keys ------------------------------------------------------------------------
    async def create_key(self, record: KeyRecord) -> None:
        await self._sql(
            f"INSERT INTO gateway_keys ({KEY_COLUMNS}) VALUES ({','.join(['%s'] * 12)})",
            (
                record.key_id,
                record.key_hash,
                record.team,
                record.namespace,
                list(record.models),
                record.budget_micro,
                record.rpm,
                record.tpm,
                record.expires_at,
                record.revoked,
                record.created_at,
                record.budget_period.value,
            ),
        )

    async def find_key(self, key_hash: str) -> KeyRecord | None:
        rows = await self._sql(
            f"SELECT {KEY_COLUMNS}, previous_until FROM gateway_keys "
            "WHERE key_hash = %s OR previous_hash = %s",
            (key_hash, key_hash),
        )
        return as_found(key_record(rows[0][:-1]), key_hash, rows[0][-1]) if rows else None

    async def list_keys(self) -> list[KeyRecord]:
        rows = await self._sql(
            f"SELECT {KEY_COLUMNS} FROM gateway_keys ORDER BY created_at, key_id"
        )
        return [key_record(r) for r in rows]

    async def revoke_key(self, key_id: str) -> bool:
        rows = await self._sql(
            "UPDATE gateway_keys SET revoked = TRUE WHERE key_id = %s RETURNING key_id",
            (key_id,),
        )
        return bool(rows)

    async def rotate_key(self, key_id: str, key_hash: str, previous_until: float | None) -> bool:
        rows = await self._sql(
            "UPDATE gateway_keys SET previous_hash = CASE WHEN %s THEN key_hash END, "
            "previous_until = %s, key_hash = %s WHERE key_id = %s AND NOT revoked "
            "RETURNING key_id",
            (previous_until is not None, previous_until, key_hash, key_id),
        )
        return bool(rows)

    # --- budgets ---------------------------------------------------------------------
    async def reserve(self, hold: Hold) -> Grant | Refusal:
        nothing = holds_nothing(hold)
        reserved_at = self._wall() if hold.reserved_at is None else hold.reserved_at
        scope_keys = [f"{self._k}scope:{s.name}" for s in hold.scopes]
        labels = "" if nothing else labels_json(hold.labels, reserved_at)
        reply = await self._reserve_once(hold, scope_keys, labels)
        if reply[0] in (b"init", "init"):
            await self._bootstrap()
            reply = await self._reserve_once(hold, scope_keys, labels)
        decision = lua.verdict(hold, reply)
        if nothing and isinstance(decision, Grant):
            # Granted without a hash or a lease: this replica settles or expires it.
            self._unheld.keep(
                hold.reservation_id,
                Unheld(
                    tuple(scope_keys),
                    hold.labels,
                    hold.plan.prompt_tokens,
                    decision.max_tokens,
                    hold.lease_until,
                    reserved_at,
                ),
            )
        return decision

    async def _reserve_once(self, hold: Hold, scope_keys: list[str], labels: str) -> list[Any]:
        plan = hold.plan
        keys = (
            scope_keys
            + [f"{self._k}win:{w.counter}" for w in hold.rpm]
            + [f"{self._k}win:{w.counter}" for w in hold.tpm]
            + [f"{self._k}res:{hold.reservation_id}", self._leases, self._init]
        )
        args: list[str | int | float] = [
            len(hold.scopes),
            len(hold.rpm),
            len(hold.tpm),
            plan.prompt_tokens,
            plan.max_tokens,
            plan.min_tokens,
            plan.rate.input_nano,
            plan.rate.output_nano,
            *["" if s.limit_micro is None else s.limit_micro for s in hold.scopes],
            *[w.limit for w in hold.rpm],
            *[w.limit for w in hold.tpm],
            hold.reservation_id,
            repr(hold.lease_until),
            2 * WINDOW_S,
            labels,
        ]
        try:
            reply: list[Any] = await self._reserve(keys=keys, args=args)
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return reply

    async def settle(self, settlement: Settlement) -> bool:
        s = settlement
        held = self._unheld.take(s.reservation_id)
        if held is not None:
            row = ledger_json(s, held.labels, held.reserved_at)
            await self._queue_unheld([(s.reservation_id, held)], [row], s.cost_micro)
            return True
        try:
            done = await self._settle(
                keys=[f"{self._k}res:{s.reservation_id}", self._leases, self._ledger],
                args=[
                    s.reservation_id,
                    s.cost_micro,
                    s.usage.prompt_tokens,
                    s.usage.completion_tokens,
                    s.upstream,
                    s.outcome.value,
                    repr(s.at),
                ],
            )
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return bool(done)

    async def renew_leases(self, reservation_ids: list[str], lease_until: float) -> int:
        # One ZADD XX for the batch: XX updates members only, so a hold that settled or
        # expired meanwhile (its member removed in the same script) is not brought back.
        # The hash has no lease of its own: EXPIRE reads the sorted set alone.
        renewed = self._unheld.renew(reservation_ids, lease_until)
        held = [rid for rid in reservation_ids if rid not in self._unheld]
        if not held:
            return renewed
        try:
            changed = await self._redis.zadd(
                self._leases, dict.fromkeys(held, lease_until), xx=True, ch=True
            )
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return renewed + int(changed or 0)

    async def expire_leases(self, now_wall_s: float) -> int:
        due = self._unheld.due(now_wall_s)
        if due:  # charged their amount, 0, as EXPIRE charges a hash's
            rows = [
                ledger_json(s, held.labels, held.reserved_at)
                for (_, held), s in zip(due, expired(due, now_wall_s), strict=True)
            ]
            await self._queue_unheld(due, rows, 0)
        try:
            count = await self._expire(
                keys=[self._k + "unused", self._leases, self._ledger],
                args=[repr(now_wall_s), self._k + "res:", 1000],
            )
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc
        return int(count) + len(due)

    async def _queue_unheld(
        self, holds: list[tuple[str, Unheld]], rows: list[str], cost_micro: int
    ) -> None:
        """Queue the ledger rows of holds of nothing: one RPUSH of all of them, or, for a
        settlement (one hold) that cost `cost_micro` after all, one script that also
        commits that cost to its scopes."""
        try:
            if cost_micro:
                [(_, held)] = holds
                await self._settle_unheld(
                    keys=[self._ledger, *held.scope_keys], args=[cost_micro, rows[0]]
                )
            else:
                await self._redis.rpush(self._ledger, *rows)
        except REDIS_ERRORS as exc:
            self._unheld.put_back(holds)
            raise StoreUnavailable(f"redis: {exc}") from exc

    async def charge(self, charge: Charge) -> None:
        s = charge.settlement
        # No reservation time: the row counts in the period it was settled in.
        row = ledger_json(s, charge.labels, None)
        try:
            await self._charge(
                keys=[f"{self._k}charged:{s.reservation_id}", self._ledger],
                args=[s.cost_micro, row, *[f"{self._k}scope:{name}" for name in charge.scopes]],
            )
        except REDIS_ERRORS as exc:
            raise StoreUnavailable(f"redis: {exc}") from exc

    # --- the ledger ------------------------------------------------------------------
    async def drain_ledger(self) -> int:
        """Move queued ledger rows into PostgreSQL if this replica holds the writer lock."""
        return await self._writer.drain()

    async def _insert_ledger(self, rows: list[tuple[Any, ...]]) -> None:
        async with self._pg_lock:
            await insert_batch(await self._conn(), rows, self._ledger_timeout_s)

    async def spend(self, by: Dimension, since_wall_s: float | None = None) -> list[SpendRow]:
        await self.drain_ledger()
        rows = await self._sql(*spend_query(by, since_wall_s))
        return [SpendRow(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]

    async def close(self) -> None:
        # If PostgreSQL is down the rows stay queued in Redis for the next writer, which
        # need not wait out the lock's TTL for them.
        with contextlib.suppress(StoreUnavailable):
            await self.drain_ledger()
        with contextlib.suppress(StoreUnavailable):
            await self._writer.release()
        await self._redis.aclose()
        if self._pg is not None:
            await self._pg.close()
