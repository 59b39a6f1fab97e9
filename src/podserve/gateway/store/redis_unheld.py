"""Holds of nothing on the Redis store: kept in the replica that made them, not in Redis.

A reservation whose amount is 0 and which holds no tokens in a tpm window (every OIP v2
request: no price per request and no tokens; a request to an unpriced model on a key
without a tpm limit) has nothing a lease could charge or give back: its `res:` hash and
`leases` member would buy only an `expired` ledger row of 0 after a crash, for an HSET
and a ZADD at reserve and EXISTS, HMGET, HINCRBY by 0, DEL and ZREM at settle. So, as the
SQLite store does (sqlite_ops), RESERVE checks and counts its rpm windows atomically,
refusing exactly as for any hold, but writes no hash and no lease, and this module keeps
what its settlement needs. Settling it queues its one ledger row, the same JSON row the
SETTLE script writes: one RPUSH (the `SETTLE_UNHELD` script when it cost something after
all, an estimate of 0 tokens that was not, since that cost must reach its scopes in the
same step); this replica's lease sweep expires one it never settled into its `expired`
row of 0, as EXPIRE does a hash.

The trade: a replica that stops with such a hold open (a crash, or a shutdown that cuts
its request) loses that hold's 0-cost `expired` ledger row, and nothing else. Every
request that completes still gets its row, and priced holds stay hashes with leases, so
the other replicas still charge a crashed one's in full.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace

from podserve.gateway.budget import Usage
from podserve.gateway.store.base import Hold, Labels, Outcome, Settlement


@dataclass(frozen=True, slots=True)
class Unheld:
    """What settling or expiring a hold of nothing needs."""

    scope_keys: tuple[str, ...]  # the Redis keys of its scopes, for a cost after all
    labels: Labels
    prompt_tokens: int
    max_tokens: int  # granted: an expiry ledgers it as used, as EXPIRE does
    lease_until: float
    reserved_at: float


def holds_nothing(hold: Hold) -> bool:
    """Whether every grant of `hold` holds nothing: amount 0 (no priced token can be in
    it) and no tokens in a tpm window. Exact for the plan alone, so RESERVE can be told
    before it runs (it checks again before writing)."""
    plan, rate = hold.plan, hold.plan.rate
    priced = plan.prompt_tokens * rate.input_nano > 0 or plan.max_tokens * rate.output_nano > 0
    tokens = bool(hold.tpm) and plan.prompt_tokens + plan.max_tokens > 0
    return not priced and not tokens


def labels_json(labels: Labels, reserved_at: float) -> str:
    """The labels a reservation's hash carries into its ledger row. `reserved_at` is a
    string: cjson re-encodes numbers with 14 significant digits, which would round a hold
    made in the last 0.1 ms of a day into the next one."""
    return json.dumps(
        {
            "key_id": labels.key_id,
            "team": labels.team,
            "namespace": labels.namespace,
            "model": labels.model,
            "request_id": labels.request_id,
            "reserved_at": repr(reserved_at),
        }
    )


def ledger_json(s: Settlement, labels: Labels, reserved_at: float | None) -> str:
    """A ledger row as the SETTLE script queues it (`postgres_sql.ledger_row` reads it)."""
    return json.dumps(
        {
            "reservation_id": s.reservation_id,
            "request_id": labels.request_id,
            "at": s.at,
            "reserved_at": reserved_at,
            "key_id": labels.key_id,
            "team": labels.team,
            "namespace": labels.namespace,
            "model": labels.model,
            "upstream": s.upstream,
            "prompt_tokens": s.usage.prompt_tokens,
            "completion_tokens": s.usage.completion_tokens,
            "cost_micro": s.cost_micro,
            "status": s.outcome.value,
        }
    )


def expired(due: list[tuple[str, Unheld]], now_wall_s: float) -> list[Settlement]:
    """The settlements of holds whose lease ran out: charged their amount, 0, with their
    tokens ledgered as used, as EXPIRE settles a hash."""
    return [
        Settlement(
            rid, Usage(held.prompt_tokens, held.max_tokens), 0, "", Outcome.EXPIRED, now_wall_s
        )
        for rid, held in due
    ]


class UnheldHolds:
    """This replica's open holds of nothing, by reservation id."""

    __slots__ = ("_open",)

    def __init__(self) -> None:
        self._open: dict[str, Unheld] = {}

    def __len__(self) -> int:
        return len(self._open)

    def keep(self, reservation_id: str, held: Unheld) -> None:
        self._open[reservation_id] = held

    def take(self, reservation_id: str) -> Unheld | None:
        """The hold, removed: a second settlement of it finds nothing here."""
        return self._open.pop(reservation_id, None)

    def put_back(self, holds: list[tuple[str, Unheld]]) -> None:
        """Holds whose row could not be queued (Redis failed): open again, so a retried
        settlement or the next sweep writes it. If the RPUSH did land, the writer's
        `ON CONFLICT (reservation_id) DO NOTHING` keeps the first row."""
        self._open.update(holds)

    def __contains__(self, reservation_id: object) -> bool:
        return reservation_id in self._open

    def renew(self, reservation_ids: list[str], lease_until: float) -> int:
        """Move these holds' leases (those kept here) to `lease_until`; how many."""
        renewed = 0
        for rid in reservation_ids:
            held = self._open.get(rid)
            if held is not None:
                self._open[rid] = replace(held, lease_until=lease_until)
                renewed += 1
        return renewed

    def due(self, now_wall_s: float) -> list[tuple[str, Unheld]]:
        """The holds whose lease ran out, removed."""
        due = [(rid, held) for rid, held in self._open.items() if held.lease_until <= now_wall_s]
        for rid, _ in due:
            del self._open[rid]
        return due
