"""Renewing the leases of this replica's reservations while their requests are in flight.

A lease exists for one case: a replica that dies holding reservations. Set once at
admission, it also ran out under a healthy request that outlived `leaseS` (a long stream,
a slow upstream): the sweep charged the whole hold as `expired`, and the real settlement
then found nothing to settle (a probe with leaseS=2: a 10-token stream charged its
5,000-token hold). So every `leaseS / 3` housekeeping pushes the lease of each hold this
replica still has in flight to now + `leaseS`, in batches (one statement or one ZADD per
`BATCH` ids). A replica that stops renews nothing, so its holds still expire within
`leaseS` of their last renewal and are charged in full: the crash guarantee is unchanged.

A hold stays here from its grant until its settlement or release is attempted
(`Accounting.settle`); a settlement the store did not take is retried, but no longer
renewed, so a store outage longer than the lease still ends in the lease's charge, as
docs/gateway.md "Store outages" says.
"""

from __future__ import annotations

from typing import Protocol

BATCH = 1000


class Renews(Protocol):
    async def renew_leases(self, reservation_ids: list[str], lease_until: float) -> int: ...


class OpenHolds:
    """This replica's reservations in the store whose requests are still in flight."""

    __slots__ = ("_ids", "_last_s", "every_s", "lease_s")

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        # A third of the lease: two renewals can fail (a store blip) before one runs out.
        self.every_s = lease_s / 3
        self._ids: dict[str, None] = {}  # insertion-ordered: the oldest renewed first
        self._last_s: float | None = None

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, reservation_id: object) -> bool:
        return reservation_id in self._ids

    def add(self, reservation_id: str) -> None:
        self._ids[reservation_id] = None

    def discard(self, reservation_id: str) -> None:
        self._ids.pop(reservation_id, None)

    def due(self, now_s: float) -> bool:
        """Whether a renewal is due at `now_s` (monotonic seconds)."""
        return self._last_s is None or now_s - self._last_s >= self.every_s

    async def renew(self, store: Renews, now_wall_s: float, now_s: float) -> int:
        """Push every open hold's lease to `now_wall_s + lease_s`; how many the store
        had (a hold settled meanwhile is not among them)."""
        ids = list(self._ids)
        until = now_wall_s + self.lease_s
        renewed = 0
        for start in range(0, len(ids), BATCH):
            renewed += await store.renew_leases(ids[start : start + BATCH], until)
        self._last_s = now_s
        return renewed
