"""The store seam: one protocol, two real implementations (SQLite; Redis + PostgreSQL).

Everything a gateway replica must agree on with the others lives behind it: keys, budget
counters (committed and reserved micro-dollars per scope), rate windows, reservations with
their leases, and the spend ledger. `reserve` and `settle` are atomic in each store; a
store that cannot answer raises `StoreUnavailable` and the edge fails closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from podserve.gateway.budget import Grant, HoldPlan, Refusal, Usage
from podserve.gateway.keys import KeyRecord


class StoreUnavailable(Exception):
    """The store did not answer (down, too slow, or refused the connection)."""

    # Whether this failure says the store is down, for the store breaker
    # (gateway/store_calls.py): False when the store answered and the request must only
    # wait its turn (another replica rebuilding Redis's counters), which counts as up.
    store_down = True


class Outcome(StrEnum):
    OK = "ok"
    CANCELLED = "cancelled"
    ERROR = "error"  # nothing served: charged nothing
    EXPIRED = "expired"  # lease ran out: charged the whole reservation


class Dimension(StrEnum):
    KEY = "key"
    TEAM = "team"
    NAMESPACE = "namespace"
    MODEL = "model"


@dataclass(frozen=True, slots=True)
class ScopeSpec:
    name: str  # "key:<id>", "team:<t>", "namespace:<n>" (periodic: "...@<period>")
    limit_micro: int | None
    refills_in_s: float | None = None  # a periodic budget: until its period ends


@dataclass(frozen=True, slots=True)
class WindowSpec:
    counter: str  # window-qualified, e.g. "rpm:key:<id>:29010203"
    name: str  # for the refusal, e.g. "rpm:key:<id>"
    limit: int
    resets_in_s: float


# A tpm counter's companion, `<counter>:held`: what outstanding reservations hold of it
# (budget.WindowState.held), given back as they settle. Both stores keep it beside the
# counter, with the counter's expiry; the Redis scripts spell it as `local HELD`.
HELD = ":held"


@dataclass(frozen=True, slots=True)
class Labels:
    key_id: str
    team: str
    namespace: str
    model: str
    request_id: str = ""  # the client's x-request-id (or the gateway's), for audits


@dataclass(frozen=True, slots=True)
class Hold:
    reservation_id: str
    plan: HoldPlan
    scopes: tuple[ScopeSpec, ...]
    rpm: tuple[WindowSpec, ...]
    tpm: tuple[WindowSpec, ...]
    lease_until: float  # wall-clock seconds
    labels: Labels
    # When the hold was made (wall-clock seconds): the time its periodic scopes were named
    # at, so its ledger row counts in the period that charged it even when it settles in
    # the next one (`spend --period`, the Redis rebuild). None: the store's clock at reserve.
    reserved_at: float | None = None


@dataclass(frozen=True, slots=True)
class Settlement:
    reservation_id: str
    usage: Usage
    cost_micro: int
    upstream: str
    outcome: Outcome
    at: float  # wall-clock seconds


@dataclass(frozen=True, slots=True)
class Charge:
    """Spend that happened without a reservation in the store (fail-open during an
    outage), recorded afterwards: committed to each scope and written to the ledger once."""

    settlement: Settlement
    scopes: tuple[str, ...]
    labels: Labels


# The time a ledger row counts at in a period: its reservation's (rows from before ledgers
# kept `reserved_at`: their settlement's).
COUNTED_AT = "COALESCE(reserved_at, at)"


def spend_sql(table: str, by: Dimension, mark: str) -> str:
    """The spend query both stores run on their ledger table (`mark`: the driver's
    placeholder): spend, tokens and requests per group, for the rows reserved since the
    one parameter (rows from before ledgers kept `reserved_at`: settled since)."""
    column = _GROUP_COLUMN[by]
    return (
        f"SELECT {column}, SUM(cost_micro), SUM(prompt_tokens), SUM(completion_tokens), "
        f"COUNT(*) FROM {table} WHERE {COUNTED_AT} >= {mark} "
        f"GROUP BY {column} ORDER BY {column}"
    )


_GROUP_COLUMN = {
    Dimension.KEY: "key_id",
    Dimension.TEAM: "team",
    Dimension.NAMESPACE: "namespace",
    Dimension.MODEL: "model",
}


@dataclass(frozen=True, slots=True)
class SpendRow:
    group: str
    cost_micro: int
    prompt_tokens: int
    completion_tokens: int
    requests: int


class Store(Protocol):
    async def create_key(self, record: KeyRecord) -> None: ...

    async def find_key(self, key_hash: str) -> KeyRecord | None: ...

    async def list_keys(self) -> list[KeyRecord]: ...

    async def revoke_key(self, key_id: str) -> bool: ...

    async def rotate_key(self, key_id: str, key_hash: str, previous_until: float | None) -> bool:
        """Give a key that is not revoked the secret whose digest is `key_hash`; the old
        secret works until `previous_until` (None: not at all). False: no such key."""
        ...

    async def reserve(self, hold: Hold) -> Grant | Refusal: ...

    async def settle(self, settlement: Settlement) -> bool:
        """False when the reservation is gone (its lease expired and it was charged)."""
        ...

    async def renew_leases(self, reservation_ids: list[str], lease_until: float) -> int:
        """Move the lease of each of these reservations that is still open to
        `lease_until` (their requests are in flight on this replica: gateway/leases.py);
        how many were open. A settled or expired one is left gone."""
        ...

    async def expire_leases(self, now_wall_s: float) -> int:
        """Charge every reservation whose lease ran out in full; how many there were."""
        ...

    async def charge(self, charge: Charge) -> None:
        """Record a `Charge`; a second call with the same reservation id does nothing."""
        ...

    async def spend(self, by: Dimension, since_wall_s: float | None = None) -> list[SpendRow]:
        """The ledger grouped by `by`; only the requests reserved at or after `since_wall_s`
        if given (rows written before ledgers kept that time: settled at or after it)."""
        ...

    async def close(self) -> None: ...
