"""Parts of a hold that depend only on the time: its id and its rate windows."""

from __future__ import annotations

import os

from podserve.gateway.key_limits import KeyLimits
from podserve.gateway.limits import window_at
from podserve.gateway.store.base import WindowSpec


def rate_windows(
    limits: KeyLimits, now: float
) -> tuple[tuple[WindowSpec, ...], tuple[WindowSpec, ...]]:
    """The rpm and tpm windows a hold made at `now` (wall seconds) counts in."""
    if not limits.rates:
        return (), ()
    window = window_at(now)
    rpm = tuple(
        WindowSpec(window.counter("rpm", s), f"rpm:{s}", r, window.resets_in_s)
        for s, r, _ in limits.rates
        if r is not None
    )
    tpm = tuple(
        WindowSpec(window.counter("tpm", s), f"tpm:{s}", t, window.resets_in_s)
        for s, _, t in limits.rates
        if t is not None
    )
    return rpm, tpm


def reservation_id(now: float) -> str:
    """Time-ordered, like a UUIDv7: microseconds since the epoch, then 64 random bits.

    The SQLite ledger and reservations tables are keyed by this id; random ids put
    each insert on a random page of the key's B-tree, so a commit of 20 settlements
    wrote about 20 index pages to the WAL, and ordered ones append to the last page:
    16 instead of 23 µs of store CPU per OIP request, 34 instead of 40 per completion,
    at 20 requests a transaction (`benchmarks/gateway.py --phases store`; the gateway
    under OIP load commits about 20 a transaction). The random half keeps ids unique
    across replicas, and a clock stepping back costs only locality.
    """
    return f"{int(now * 1_000_000):016x}{os.urandom(8).hex()}"
