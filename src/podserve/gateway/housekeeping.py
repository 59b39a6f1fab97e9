"""The gateway's background round: the leases of holds in flight here are renewed, leases
that ran out are charged, charges made while the store was down are recorded,
settlements it did not take are retried, and the ledger's batched writes are drained."""

from __future__ import annotations

import asyncio
import logging
import time

from podserve.gateway.accounting import Accounting

log = logging.getLogger("podserve.gateway")


async def housekeep(accounting: Accounting, lease_s: float) -> None:
    """Runs until cancelled. A failure (the store may be down) is logged once per outage
    and retried every round; requests meanwhile fail closed on their own."""
    store = accounting.store
    lease_every_s = max(0.05, min(5.0, lease_s / 4))
    last_lease = 0.0
    failing = False
    while True:
        await asyncio.sleep(0.2)  # a period, not synchronisation
        try:
            # Renewed before the sweep: a hold still in flight here is never its victim
            # (leases.py); only a stopped replica's holds run out.
            await accounting.renew_leases()
            if time.monotonic() - last_lease >= lease_every_s:
                if await store.expire_leases(time.time()):
                    accounting.waiters.wake_all()  # room made outside a settlement here
                last_lease = time.monotonic()
            await accounting.flush_offline()
            await accounting.retry_settlements()
            drain = getattr(store, "drain_ledger", None)
            if drain is not None:
                await drain()
            if failing:
                log.info("gateway housekeeping recovered")
            failing = False
        except Exception:
            if not failing:  # once per outage, not every 0.2 s
                log.warning("gateway housekeeping failed", exc_info=True)
            failing = True
