"""Reserve and settle inside one SQLite transaction, writing only what a crash needs.

`Tx` is one transaction as the operations see it: the connection, the reservations that
hold nothing (kept in memory, not in the file), and the scope counters' changes, summed
and written once when the transaction commits. What each write buys:

- A reservation's row exists so that a gateway that dies holding it is settled
  conservatively by the next one's lease expiry: its amount moves from `reserved` to
  `committed`. A hold of 0 (an OIP request, or any unpriced model) charges 0 at expiry and
  changes no counter, so its row would buy only an `expired` ledger row of 0 after a crash.
  It is kept in memory instead: settled (one ledger row, the same as before) or expired by
  this process's lease sweep exactly as a row would be; only a gateway that stops with it
  open (a crash, or a shutdown that cuts its request) loses it, and with it that 0-cost
  `expired` row. Every request that completes still gets its ledger row.
- Scope counters (`committed`, `reserved`) are three hot rows per key. Each reservation
  and settlement used to update them with its own statement; under load one transaction
  carries several of each, so their changes are summed in `Tx` (reads add the pending
  changes, so each operation sees the ones before it) and written by one statement at the
  end: one upsert of each touched scope per transaction instead of two statements per
  request. Same rows, same totals at every commit.
- A scope without a limit cannot refuse (`budget.grant` skips it), so a reservation reads
  only the scopes that have one: a key with no budget anywhere reads no scope row.

Measured with py-spy on the benchmark's OIP W1 load (benchmarks/gateway.py --profile): the
store was 21% of the gateway's CPU per request (a reservation row written and deleted, a
ledger row, the scope rows). `benchmarks/gateway.py --phases store`: 41-42 → 16 µs of CPU
per OIP request, 52-53 → 34 per completion, at 20 requests a transaction (with the
time-ordered ids of `Accounting`); docs/gateway.md "Store writes per request".
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from podserve.gateway.budget import Grant, Refusal, ScopeState, WindowState, grant
from podserve.gateway.limits import WINDOW_S
from podserve.gateway.store.base import HELD, Hold, Labels, Settlement


@dataclass(frozen=True, slots=True)
class Open:
    """An unsettled reservation, as its row (or its in-memory record) holds it."""

    scopes: tuple[str, ...]
    amount: int
    tpm: tuple[str, ...]
    tpm_tokens: int
    prompt_tokens: int
    max_tokens: int
    lease_until: float
    labels: Labels
    reserved_at: float | None  # None: a row from before the column (sqlite._ADDED)


class Tx:
    """One transaction's view. In-memory changes (`unheld`) and scope counter changes
    take effect only through `commit`: a transaction that fails leaves both as they were."""

    __slots__ = ("_added", "_scopes", "_taken", "_unheld", "db")

    def __init__(self, db: sqlite3.Connection, unheld: dict[str, Open]) -> None:
        self.db = db
        self._unheld = unheld
        self._added: dict[str, Open] = {}
        self._taken: set[str] = set()
        self._scopes: dict[str, list[int]] = {}  # name -> [committed, reserved] to add

    def keep(self, reservation_id: str, held: Open) -> None:
        self._added[reservation_id] = held

    def take(self, reservation_id: str) -> Open | None:
        """The in-memory reservation, removed (None: not held in memory, or taken)."""
        found = self._added.pop(reservation_id, None)
        if found is not None or reservation_id in self._taken:
            return found
        found = self._unheld.get(reservation_id)
        if found is not None:
            self._taken.add(reservation_id)
        return found

    def due(self, now_wall_s: float) -> list[tuple[str, Open]]:
        """In-memory reservations whose lease ran out (not yet taken)."""
        return [
            (rid, held)
            for rid, held in (*self._unheld.items(), *self._added.items())
            if held.lease_until <= now_wall_s and rid not in self._taken
        ]

    def scope_state(self, names: list[str]) -> dict[str, tuple[int, int]]:
        rows = self.db.execute(
            f"SELECT name, committed, reserved FROM scopes WHERE name IN ({marks(names)})",
            names,
        )
        state = {name: (committed, reserved) for name, committed, reserved in rows}
        for name in names:
            pending = self._scopes.get(name)
            if pending is not None:
                committed, reserved = state.get(name, (0, 0))
                state[name] = (committed + pending[0], reserved + pending[1])
        return state

    def add(self, names: tuple[str, ...], committed: int, reserved: int) -> None:
        for name in names:
            pending = self._scopes.get(name)
            if pending is None:
                self._scopes[name] = [committed, reserved]
            else:
                pending[0] += committed
                pending[1] += reserved

    def flush(self) -> None:
        """Write the summed scope changes (inside the transaction, before COMMIT)."""
        rows = [(name, c, r) for name, (c, r) in self._scopes.items() if c or r]
        self._scopes.clear()
        if rows:
            self.db.executemany(
                "INSERT INTO scopes (name, committed, reserved) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET committed = committed + excluded.committed, "
                "reserved = reserved + excluded.reserved",
                rows,
            )

    def commit(self) -> None:
        """The transaction committed: apply the in-memory changes."""
        for rid in self._taken:
            self._unheld.pop(rid, None)
        self._unheld.update(self._added)


def reserve_without_sql(hold: Hold, at: float, unheld: dict[str, Open]) -> Grant | None:
    """The grant of a hold that needs no SQL: no scope with a limit and no rate window
    (nothing can refuse it, `budget.grant`), and nothing to hold (its amount is 0). None
    when the reservation must go through a transaction."""
    if hold.rpm or hold.tpm or any(s.limit_micro is not None for s in hold.scopes):
        return None
    decision = grant(hold.plan, ())
    if not isinstance(decision, Grant) or decision.amount_micro:
        return None
    unheld[hold.reservation_id] = _open(hold, decision, at)
    return decision


def reserve(tx: Tx, hold: Hold, at: float) -> Grant | Refusal:
    """Reserve `hold`, made at `at` (wall seconds; its ledger row's `reserved_at`)."""
    limited = [s.name for s in hold.scopes if s.limit_micro is not None]
    state = tx.scope_state(limited) if limited else {}
    budgets = [
        ScopeState(s.name, s.limit_micro, *state.get(s.name, (0, 0)), s.refills_in_s)
        for s in hold.scopes
    ]
    counters = [w.counter for w in (*hold.rpm, *hold.tpm)]
    counters += [w.counter + HELD for w in hold.tpm]
    used: dict[str, int] = (
        dict(
            tx.db.execute(
                f"SELECT counter, used FROM windows WHERE counter IN ({marks(counters)})",
                counters,
            ).fetchall()
        )
        if counters
        else {}
    )
    rpm = [WindowState(w.name, w.limit, used.get(w.counter, 0), w.resets_in_s) for w in hold.rpm]
    tpm = [
        WindowState(
            w.name, w.limit, used.get(w.counter, 0), w.resets_in_s, used.get(w.counter + HELD, 0)
        )
        for w in hold.tpm
    ]
    decision = grant(hold.plan, budgets, rpm, tpm)
    if isinstance(decision, Refusal):
        return decision
    if counters:
        expires = hold.lease_until + WINDOW_S
        tx.db.executemany(
            "INSERT INTO windows VALUES (?, ?, ?) ON CONFLICT(counter) "
            "DO UPDATE SET used = used + excluded.used",
            [(w.counter, 1, expires) for w in hold.rpm]
            + [(w.counter, decision.tpm_tokens, expires) for w in hold.tpm]
            + [(w.counter + HELD, decision.tpm_tokens, expires) for w in hold.tpm],
        )
    held = _open(hold, decision, at)
    if not decision.amount_micro:
        tx.keep(hold.reservation_id, held)  # nothing for a lease to charge: no row
        return decision
    tx.add(held.scopes, 0, decision.amount_micro)
    labels = hold.labels
    tx.db.execute(
        "INSERT INTO reservations VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            hold.reservation_id,
            names_json(held.scopes),
            decision.amount_micro,
            names_json(held.tpm),
            decision.tpm_tokens,
            hold.plan.prompt_tokens,
            decision.max_tokens,
            hold.lease_until,
            labels.key_id,
            labels.team,
            labels.namespace,
            labels.model,
            labels.request_id,
            held.reserved_at,
        ),
    )
    return decision


def settle(tx: Tx, s: Settlement) -> bool:
    held = tx.take(s.reservation_id)
    if held is None:
        # DELETE ... RETURNING (SQLite 3.35+): the reservation is read and removed in one
        # statement; a second settlement of the same id finds nothing and changes nothing.
        row = tx.db.execute(
            "DELETE FROM reservations WHERE id = ? RETURNING scopes, amount, tpm, tpm_tokens, "
            "prompt_tokens, max_tokens, lease_until, key_id, team, namespace, model, request_id, "
            "reserved_at",
            (s.reservation_id,),
        ).fetchone()
        if row is None:
            return False
        held = from_row(row)
    # The reservation's amount moves to committed as the real cost (also when it held
    # nothing yet cost something: an estimate of 0 tokens).
    if held.amount or s.cost_micro:
        tx.add(held.scopes, s.cost_micro, -held.amount)
    unused = held.tpm_tokens - s.usage.prompt_tokens - s.usage.completion_tokens
    if unused > 0 and held.tpm:
        tx.db.execute(
            f"UPDATE windows SET used = used - ? WHERE counter IN ({marks(list(held.tpm))})",
            (unused, *held.tpm),
        )
    if held.tpm_tokens and held.tpm:
        holding = [counter + HELD for counter in held.tpm]
        tx.db.execute(
            f"UPDATE windows SET used = used - ? WHERE counter IN ({marks(holding)})",
            (held.tpm_tokens, *holding),
        )
    write_ledger(tx, s, held.labels, held.reserved_at)
    return True


def write_ledger(tx: Tx, s: Settlement, labels: Labels, reserved_at: float | None) -> None:
    """The settlement's one ledger row (a settlement, a lease expiry, a late charge), with
    the time of its reservation: the period its budget was charged in."""
    tx.db.execute(
        "INSERT INTO ledger VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (
            s.reservation_id,
            labels.request_id,
            s.at,
            labels.key_id,
            labels.team,
            labels.namespace,
            labels.model,
            s.upstream,
            s.usage.prompt_tokens,
            s.usage.completion_tokens,
            s.cost_micro,
            s.outcome.value,
            reserved_at,
        ),
    )


def from_row(row: Any) -> Open:
    """A `reservations` row (the columns `settle` returns, typed by the schema)."""
    scopes, amount, tpm, tpm_tokens, prompt, max_tokens, lease, *labels, reserved_at = row
    return Open(
        names_of(scopes),
        amount,
        names_of(tpm),
        tpm_tokens,
        prompt,
        max_tokens,
        lease,
        Labels(*labels),
        reserved_at,
    )


def _open(hold: Hold, decision: Grant, at: float) -> Open:
    return Open(
        tuple([s.name for s in hold.scopes]),
        decision.amount_micro,
        tuple([w.counter for w in hold.tpm]),
        decision.tpm_tokens,
        hold.plan.prompt_tokens,
        decision.max_tokens,
        hold.lease_until,
        hold.labels,
        at,
    )


# A key's scope names are the same tuple on every request: encode and decode each once
# (json.dumps of a short list was 1.4% of the gateway's CPU per OIP request in py-spy).
_ENCODED: dict[tuple[str, ...], str] = {}
_DECODED: dict[str, tuple[str, ...]] = {}
_CACHE_MAX = 4096


def names_json(names: tuple[str, ...]) -> str:
    found = _ENCODED.get(names)
    if found is None:
        if len(_ENCODED) >= _CACHE_MAX:
            _ENCODED.clear()
        found = _ENCODED[names] = json.dumps(list(names))
    return found


def names_of(encoded: str) -> tuple[str, ...]:
    found = _DECODED.get(encoded)
    if found is None:
        if len(_DECODED) >= _CACHE_MAX:
            _DECODED.clear()
        found = _DECODED[encoded] = tuple(json.loads(encoded))
    return found


def marks(values: list[str]) -> str:
    return ",".join("?" * len(values))
