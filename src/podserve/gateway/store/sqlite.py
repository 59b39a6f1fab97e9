"""The embedded store: one SQLite file, one gateway replica, nothing to install.

`reserve` and `settle` run inside `BEGIN IMMEDIATE` transactions, so they are atomic
against another process on the same file too (the CLI's `keys` and `spend` commands). Calls
are synchronous on the event loop: a WAL-mode local transaction takes tens of microseconds,
less than a hop to a thread would.

Settlements are group-committed: each is queued and written, in arrival order, in one
transaction at the end of the event-loop turn that queued it. A commit appends every page
it touched to the WAL (the scopes row, the reservation with its indexes, the ledger row
with its key: several 4 KiB pages, https://www.sqlite.org/wal.html "Performance
Considerations"), and py-spy put the store at about a third of the gateway's CPU per OIP
request with one transaction per request (benchmarks/gateway.py --profile); sharing a
transaction writes each page once. An operation cancelled before its batch runs writes
nothing (a settlement's lease settles it).

A priced reservation does not wait for the end of the turn: it is committed at once, in a
transaction with the settlements queued before it, so it sees the budget they released
(arrival order keeps every decision exact), and its request is forwarded in the same step.
Waiting cost a completion 3.4 ms p50 at c=64 (docs/gateway.md, "Where a completion's added
time goes"): the turn's other work, the commit, then a second turn for the task to resume.
A reservation is committed before its request is forwarded either way, so a crashed
gateway's requests are still charged through their leases.

What each transaction writes, and why a hold of nothing has no row, is in `sqlite_ops`
(the reserve and settle operations): one ledger row per settled request, a reservation row
only when a lease would have something to charge, scope counters once per transaction.

A ledger row carries its reservation's time (`reserved_at`) besides its settlement's
(`at`), and `spend` selects by it: a periodic budget charged a request in the period it
was reserved in, even when it settled in the next one (gateway/periods.py).

The store is in process (`in_process`): a call cannot hang on a network, so the gateway
puts no deadline on it (a deadline could only fire while the call waits for its loop turn,
and would then charge a settled request in full through its lease).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from podserve.config.gateway_config import BudgetPeriod
from podserve.gateway.budget import Grant, Refusal, Usage
from podserve.gateway.keys import KeyRecord, as_found
from podserve.gateway.store.base import (
    Charge,
    Dimension,
    Hold,
    Outcome,
    Settlement,
    SpendRow,
    StoreUnavailable,
    spend_sql,
)
from podserve.gateway.store.sqlite_ops import (
    Open,
    Tx,
    marks,
    reserve_without_sql,
    write_ledger,
)
from podserve.gateway.store.sqlite_ops import reserve as reserve_in
from podserve.gateway.store.sqlite_ops import settle as settle_in

_SCHEMA = """
CREATE TABLE IF NOT EXISTS keys (
  key_id TEXT PRIMARY KEY, key_hash TEXT UNIQUE NOT NULL, team TEXT NOT NULL,
  namespace TEXT NOT NULL, models TEXT NOT NULL, budget_micro INTEGER, rpm INTEGER,
  tpm INTEGER, expires_at REAL, revoked INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL,
  budget_period TEXT NOT NULL DEFAULT 'lifetime');
CREATE TABLE IF NOT EXISTS scopes (
  name TEXT PRIMARY KEY, committed INTEGER NOT NULL DEFAULT 0,
  reserved INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS windows (
  counter TEXT PRIMARY KEY, used INTEGER NOT NULL, expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS reservations (
  id TEXT PRIMARY KEY, scopes TEXT NOT NULL, amount INTEGER NOT NULL, tpm TEXT NOT NULL,
  tpm_tokens INTEGER NOT NULL, prompt_tokens INTEGER NOT NULL, max_tokens INTEGER NOT NULL,
  lease_until REAL NOT NULL, key_id TEXT, team TEXT, namespace TEXT, model TEXT,
  request_id TEXT, reserved_at REAL);
CREATE INDEX IF NOT EXISTS reservations_lease ON reservations (lease_until);
CREATE TABLE IF NOT EXISTS ledger (
  reservation_id TEXT PRIMARY KEY, request_id TEXT, at REAL NOT NULL, key_id TEXT,
  team TEXT, namespace TEXT,
  model TEXT, upstream TEXT, prompt_tokens INTEGER NOT NULL,
  completion_tokens INTEGER NOT NULL, cost_micro INTEGER NOT NULL, status TEXT NOT NULL,
  reserved_at REAL);
"""
# Columns added since the first schema, in order: (table, column, its definition). A file
# made before one gets it, so an upgraded gateway opens the store it ran on: keys before
# budget periods are lifetime; reservations and ledger rows from before `reserved_at` have
# NULL there, and count in the period they were settled in, as they always did.
_ADDED = (
    ("keys", "budget_period", "TEXT NOT NULL DEFAULT 'lifetime'"),
    ("reservations", "reserved_at", "REAL"),
    ("ledger", "reserved_at", "REAL"),
    ("keys", "previous_hash", "TEXT"),  # the secret before a rotation, during its grace
    ("keys", "previous_until", "REAL"),
)
# Read by name: files differ in which `_ADDED` columns came when.
_KEY_COLUMNS = (
    "key_id, key_hash, team, namespace, models, budget_micro, rpm, tpm, expires_at, "
    "revoked, created_at, budget_period"
)

T = TypeVar("T")
_Op = Callable[[Tx], Any]


class SqliteStore:
    in_process = True

    def __init__(
        self,
        path: str | Path,
        *,
        wall: Callable[[], float] = time.time,
        busy_timeout_s: float = 5.0,
    ) -> None:
        """`busy_timeout_s`: how long a transaction waits for another writer's lock (the
        `keys` CLI, a backup, a `sqlite3` shell) before it fails as the store down. The
        wait blocks the thread: the gateway passes its `storeTimeoutMs`, since on its
        event loop a 5 s wait held `/healthz` and every request for 5 s."""
        if sqlite3.sqlite_version_info < (3, 35):  # DELETE ... RETURNING in sqlite_ops.settle
            raise StoreUnavailable(
                f"sqlite store needs SQLite 3.35 or later; this Python has {sqlite3.sqlite_version}"
            )
        try:
            self._db = sqlite3.connect(str(path), isolation_level=None, timeout=busy_timeout_s)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            _migrate(self._db)
            self._db.execute(
                "CREATE INDEX IF NOT EXISTS keys_previous_hash ON keys (previous_hash)"
            )
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite store {path}: {exc}") from exc
        self._batch: list[tuple[_Op, asyncio.Future[Any]]] = []
        self._unheld: dict[str, Open] = {}  # reservations of nothing: no row (sqlite_ops)
        self.transactions = 0  # begun: what group commit saves
        self._wall = wall  # a hold's time when its caller gave none (Hold.reserved_at)

    async def _queued(self, op: Callable[[Tx], T]) -> T:
        """Run `op` in this event-loop turn's transaction, after those queued before it."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        if not self._batch:
            loop.call_soon(self._commit_batch)
        self._batch.append((op, future))
        return await future

    def _commit_batch(self) -> None:
        """One transaction: the queued operations in order; all fail if it fails."""
        with contextlib.suppress(Exception):  # every caller in it got the failure
            self._at_once(None)

    def _at_once(self, op: Callable[[Tx], T] | None) -> T | None:
        """One transaction now: the queued operations in arrival order, then `op`. Their
        callers get their results; all fail if it fails, `op`'s caller by the raise."""
        batch, self._batch = self._batch, []
        live = [(queued, future) for queued, future in batch if not future.cancelled()]
        if not live and op is None:
            return None
        try:
            with self._tx() as tx:
                results = [queued(tx) for queued, _ in live]
                mine = None if op is None else op(tx)
        except StoreUnavailable as exc:  # the database failed: every caller sees it
            for _, future in live:
                if not future.done():
                    future.set_exception(exc)
            raise
        except Exception:
            if not live:
                raise
            # One operation raised (a bug, a value the database cannot hold), and took
            # the transaction down with it. Run them again one transaction each, so
            # only its caller fails: the others' settlements were lost with it before,
            # and their leases charged them in full.
            return self._one_by_one(live, op)
        for (_, future), done in zip(live, results, strict=True):
            if not future.done():
                future.set_result(done)
        return mine

    def _one_by_one(
        self, live: list[tuple[_Op, asyncio.Future[Any]]], op: Callable[[Tx], T] | None
    ) -> T | None:
        for queued, future in live:
            try:
                with self._tx() as tx:
                    done = queued(tx)
            except Exception as exc:
                if not future.done():
                    future.set_exception(exc)
            else:
                if not future.done():
                    future.set_result(done)
        if op is None:
            return None
        with self._tx() as tx:
            return op(tx)

    @contextmanager
    def _tx(self) -> Iterator[Tx]:
        self.transactions += 1
        tx = Tx(self._db, self._unheld)
        try:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield tx
                tx.flush()
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite store: {exc}") from exc
        tx.commit()

    # --- keys ------------------------------------------------------------------------
    async def create_key(self, record: KeyRecord) -> None:
        with self._tx() as tx:
            tx.db.execute(
                f"INSERT INTO keys ({_KEY_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    record.key_id,
                    record.key_hash,
                    record.team,
                    record.namespace,
                    json.dumps(list(record.models)),
                    record.budget_micro,
                    record.rpm,
                    record.tpm,
                    record.expires_at,
                    int(record.revoked),
                    record.created_at,
                    record.budget_period.value,
                ),
            )

    async def find_key(self, key_hash: str) -> KeyRecord | None:
        row = self._db.execute(
            f"SELECT {_KEY_COLUMNS}, previous_until FROM keys "
            "WHERE key_hash = ? OR previous_hash = ?",
            (key_hash, key_hash),
        ).fetchone()
        return None if row is None else as_found(_key(row[:-1]), key_hash, row[-1])

    async def list_keys(self) -> list[KeyRecord]:
        rows = self._db.execute(
            f"SELECT {_KEY_COLUMNS} FROM keys ORDER BY created_at, key_id"
        ).fetchall()
        return [_key(r) for r in rows]

    async def revoke_key(self, key_id: str) -> bool:
        with self._tx() as tx:
            cur = tx.db.execute("UPDATE keys SET revoked = 1 WHERE key_id = ?", (key_id,))
            return cur.rowcount > 0

    async def rotate_key(self, key_id: str, key_hash: str, previous_until: float | None) -> bool:
        keep_old = previous_until is not None
        with self._tx() as tx:
            cur = tx.db.execute(
                "UPDATE keys SET previous_hash = CASE WHEN ? THEN key_hash END, "
                "previous_until = ?, key_hash = ? WHERE key_id = ? AND revoked = 0",
                (keep_old, previous_until, key_hash, key_id),
            )
            return cur.rowcount > 0

    # --- budgets ---------------------------------------------------------------------
    async def reserve(self, hold: Hold) -> Grant | Refusal:
        # A hold of nothing that nothing can refuse needs no transaction: it reads and
        # writes nothing (sqlite_ops.reserve_without_sql).
        at = self._wall() if hold.reserved_at is None else hold.reserved_at
        found = reserve_without_sql(hold, at, self._unheld)
        if found is not None:
            return found
        granted = self._at_once(lambda tx: reserve_in(tx, hold, at))
        assert granted is not None
        return granted

    async def settle(self, settlement: Settlement) -> bool:
        return await self._queued(lambda tx: settle_in(tx, settlement))

    async def renew_leases(self, reservation_ids: list[str], lease_until: float) -> int:
        # One statement per batch (leases.BATCH ids), inside one transaction; the holds
        # of nothing are renewed in memory, where they are kept.
        renewed = 0
        with self._tx() as tx:
            if reservation_ids:
                cur = tx.db.execute(
                    f"UPDATE reservations SET lease_until = ? "
                    f"WHERE id IN ({marks(reservation_ids)})",
                    (lease_until, *reservation_ids),
                )
                renewed = cur.rowcount
        for rid in reservation_ids:
            held = self._unheld.get(rid)
            if held is not None:
                self._unheld[rid] = replace(held, lease_until=lease_until)
                renewed += 1
        return renewed

    async def expire_leases(self, now_wall_s: float) -> int:
        with self._tx() as tx:
            rows = tx.db.execute(
                "SELECT id, amount, prompt_tokens, max_tokens FROM reservations "
                "WHERE lease_until <= ?",
                (now_wall_s,),
            ).fetchall()
            due = [
                (rid, held.amount, held.prompt_tokens, held.max_tokens)
                for rid, held in tx.due(now_wall_s)
            ]
            for rid, amount, prompt, max_tokens in (*rows, *due):
                settle_in(
                    tx,
                    Settlement(
                        rid, Usage(prompt, max_tokens), amount, "", Outcome.EXPIRED, now_wall_s
                    ),
                )
            tx.db.execute("DELETE FROM windows WHERE expires_at <= ?", (now_wall_s,))
            return len(rows) + len(due)

    async def charge(self, charge: Charge) -> None:
        s, labels = charge.settlement, charge.labels
        with self._tx() as tx:
            seen = tx.db.execute(
                "SELECT 1 FROM ledger WHERE reservation_id = ?", (s.reservation_id,)
            ).fetchone()
            if seen is not None:
                return
            tx.add(charge.scopes, s.cost_micro, 0)
            write_ledger(tx, s, labels, None)  # no reservation: counts when it settled

    async def spend(self, by: Dimension, since_wall_s: float | None = None) -> list[SpendRow]:
        rows = self._db.execute(
            spend_sql("ledger", by, "?"),
            (float("-inf") if since_wall_s is None else since_wall_s,),
        ).fetchall()
        return [SpendRow(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4])) for r in rows]

    async def close(self) -> None:
        self._db.close()


def _migrate(db: sqlite3.Connection) -> None:
    """Add the columns `_ADDED` names that an older file lacks (ALTER TABLE appends, so
    the column order is the same as in a file made with the current schema)."""
    for table, column, definition in _ADDED:
        columns = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if column not in columns:
            db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")


def _key(row: tuple[object, ...]) -> KeyRecord:
    (
        key_id,
        key_hash,
        team,
        namespace,
        models,
        budget,
        rpm,
        tpm,
        expires,
        revoked,
        created,
        period,
    ) = row
    return KeyRecord(
        key_id=str(key_id),
        key_hash=str(key_hash),
        team=str(team),
        namespace=str(namespace),
        models=tuple(json.loads(str(models))),
        budget_micro=None if budget is None else int(str(budget)),
        rpm=None if rpm is None else int(str(rpm)),
        tpm=None if tpm is None else int(str(tpm)),
        expires_at=None if expires is None else float(str(expires)),
        revoked=bool(revoked),
        created_at=float(str(created)),
        budget_period=BudgetPeriod(str(period)),
    )
