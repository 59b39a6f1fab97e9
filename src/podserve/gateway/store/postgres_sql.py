"""The PostgreSQL half of the shared store, as SQL and row shapes: the tables (keys and
the append-only ledger), how their rows become records, and the query that rebuilds
Redis's committed counters from the ledger (an empty Redis: restarted or flushed), named
as the live counters name their scopes.

A ledger row carries its reservation's time (`reserved_at`) besides its settlement's
(`at`): a request's periodic budget was charged in the period it was reserved in, so the
rebuild and `spend` select by that time. Rows from before the column have NULL there and
count by `at`, as they always did (`COALESCE`)."""

from __future__ import annotations

from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from podserve.config.gateway_config import BudgetPeriod
from podserve.gateway.keys import KeyRecord
from podserve.gateway.periods import periodic_spans
from podserve.gateway.store.base import COUNTED_AT, Dimension, spend_sql

# The schema is one multi-statement query, so PostgreSQL runs it as one implicit
# transaction, and the transaction-scoped advisory lock first serializes the replicas
# (and `keys`/`spend` CLI runs) that set it up at the same time. Without it, concurrent
# `CREATE TABLE IF NOT EXISTS` on a fresh database fail with UniqueViolation on
# pg_type_typname_nsp_index (the check and the catalog insert are not atomic): six
# replicas starting together failed that way in 10 of 10 tries
# (tests/gateway/test_stores.py). The key is an arbitrary constant of podserve's.
SCHEMA_LOCK_KEY = 7_151_300_021
SCHEMA = f"""
SELECT pg_advisory_xact_lock({SCHEMA_LOCK_KEY});
CREATE TABLE IF NOT EXISTS gateway_keys (
  key_id TEXT PRIMARY KEY, key_hash TEXT UNIQUE NOT NULL, team TEXT NOT NULL,
  namespace TEXT NOT NULL, models TEXT[] NOT NULL, budget_micro BIGINT, rpm INTEGER,
  tpm INTEGER, expires_at DOUBLE PRECISION, revoked BOOLEAN NOT NULL DEFAULT FALSE,
  created_at DOUBLE PRECISION NOT NULL);
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS budget_period TEXT NOT NULL
  DEFAULT 'lifetime';
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS previous_hash TEXT;
ALTER TABLE gateway_keys ADD COLUMN IF NOT EXISTS previous_until DOUBLE PRECISION;
CREATE INDEX IF NOT EXISTS gateway_keys_previous_hash ON gateway_keys (previous_hash);
CREATE TABLE IF NOT EXISTS gateway_ledger (
  reservation_id TEXT PRIMARY KEY, request_id TEXT, at DOUBLE PRECISION NOT NULL,
  key_id TEXT, team TEXT,
  namespace TEXT, model TEXT, upstream TEXT, prompt_tokens BIGINT NOT NULL,
  completion_tokens BIGINT NOT NULL, cost_micro BIGINT NOT NULL, status TEXT NOT NULL);
ALTER TABLE gateway_ledger ADD COLUMN IF NOT EXISTS reserved_at DOUBLE PRECISION;
"""
INSERT_LEDGER = (
    b"INSERT INTO gateway_ledger (reservation_id, request_id, at, key_id, team, namespace, "
    b"model, upstream, prompt_tokens, completion_tokens, cost_micro, status, reserved_at) "
    b"VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s) "
    b"ON CONFLICT (reservation_id) DO NOTHING"
)
# TCP keepalives and a bound on unacknowledged data (libpq's defaults are the kernel's:
# hours), so a connection to a PostgreSQL that went away (a partition, a half-open
# connection after a failover) fails in about 10 s instead of holding the store's one
# connection, and every key lookup queued behind it, until the kernel gives up.
_CONNECTION_DEFAULTS = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "10000",
}
KEY_COLUMNS = (
    "key_id, key_hash, team, namespace, models, budget_micro, rpm, tpm, expires_at, "
    "revoked, created_at, budget_period"
)


def ledger_row(row: dict[str, Any]) -> tuple[Any, ...]:
    """A queued JSON row (redis_unheld.ledger_json, or lua.SETTLE's) as `INSERT_LEDGER`
    takes it; a row queued before rows carried `reserved_at` has none (NULL)."""
    reserved_at = row.get("reserved_at")
    return (
        str(row["reservation_id"]),
        row.get("request_id"),
        float(row["at"]),
        row.get("key_id"),
        row.get("team"),
        row.get("namespace"),
        row.get("model"),
        row.get("upstream"),
        int(row["prompt_tokens"]),
        int(row["completion_tokens"]),
        int(row["cost_micro"]),
        str(row["status"]),
        None if reserved_at is None else float(reserved_at),
    )


def key_record(row: tuple[Any, ...]) -> KeyRecord:
    key_id, key_hash, team, namespace, models, budget, rpm, tpm, expires, revoked, created = row[
        :11
    ]
    return KeyRecord(
        key_id=key_id,
        key_hash=key_hash,
        team=team,
        namespace=namespace,
        models=tuple(models),
        budget_micro=budget,
        rpm=rpm,
        tpm=tpm,
        expires_at=expires,
        revoked=bool(revoked),
        created_at=float(created),
        budget_period=BudgetPeriod(row[11]),
    )


def committed_query(now_wall_s: float) -> tuple[str, tuple[Any, ...]]:
    """Every scope's committed spend from the ledger, as the live counters name it: the
    lifetime scope (`key:<id>`) and, for each budget period, the current one
    (`key:<id>@2026-12`, from the rows reserved within it; gateway/periods.py). Which
    keys, teams and namespaces have periodic budgets is not the store's to know, so every
    scope gets all four; the unused ones are never read. A request reserved just before a
    boundary and settled after it counts in the old period, as the live counters had it;
    one reserved after the period (a replica whose clock runs ahead) in the next one."""
    parts: list[str] = []
    params: list[Any] = []
    for column, prefix in (("key_id", "key:"), ("team", "team:"), ("namespace", "namespace:")):
        parts.append(
            f"SELECT %s || {column}, SUM(cost_micro) FROM gateway_ledger GROUP BY {column}"
        )
        params.append(prefix)
        for span in periodic_spans(now_wall_s):
            parts.append(
                f"SELECT %s || {column} || %s, SUM(cost_micro) FROM gateway_ledger "
                f"WHERE {COUNTED_AT} >= %s AND {COUNTED_AT} < %s GROUP BY {column}"
            )
            params += [prefix, f"@{span.label}", span.start_s, span.end_s]
    return " UNION ALL ".join(parts), tuple(params)


def spend_query(by: Dimension, since_wall_s: float | None) -> tuple[str, tuple[Any, ...]]:
    """`spend_sql` on `gateway_ledger`, for the rows since `since_wall_s` (all when None)."""
    return (
        spend_sql("gateway_ledger", by, "%s"),
        (float("-inf") if since_wall_s is None else since_wall_s,),
    )


def connect_options(dsn: str) -> str:
    """`dsn` with the connection defaults above where it sets none of its own."""
    return make_conninfo("", **{**_CONNECTION_DEFAULTS, **conninfo_to_dict(dsn)})
