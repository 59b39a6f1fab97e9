"""The store deadline with a real hung Redis (the process stopped: connections open, no
answers): the request is refused while the call is still outstanding, and a reservation
the store makes after the refusal is released at zero instead of being charged through
its lease."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis

from podserve.config.gateway_config import load_gateway_config
from podserve.gateway.accounting import Accounting
from podserve.gateway.budget import Usage
from podserve.gateway.errors import StoreDown
from podserve.gateway.keys import KeyRecord, key_id_of, new_key
from podserve.gateway.store.base import Dimension, Outcome
from podserve.gateway.wire import Billable, Endpoint, billable
from tests.gateway.conftest import reset_shared_store
from tests.gateway.support import redis_server

CONFIG = """
prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}
storeTimeoutMs: 50
"""


@contextlib.asynccontextmanager
async def _settled_once(
    postgres_dsn: str, timeout_s: float
) -> AsyncIterator[tuple[str, Any, Accounting, KeyRecord, Billable]]:
    """A real Redis + PostgreSQL store (the Redis client's socket timeout `timeout_s`),
    accounting on it, and a key whose first request has been admitted and settled, so the
    connections are warm and the scripts loaded: 3 prompt bytes x 1 + 8 output tokens x 2
    = 19 micro-dollars."""
    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    with redis_server() as url:
        reset_shared_store(url, postgres_dsn)
        store = RedisPostgresStore(url, postgres_dsn, timeout_s=timeout_s)
        await store.setup()
        try:
            accounting = Accounting(load_gateway_config(CONFIG), store)
            _, digest = new_key()
            key = KeyRecord(
                key_id_of(digest), digest, "t", "ns", (), 10_000, None, None, None, False,
                time.time(),
            )  # fmt: skip
            await store.create_key(key)
            bill = billable({"model": "m", "prompt": "abc", "max_tokens": 8}, Endpoint.COMPLETIONS)
            first = await accounting.admit(key, bill)
            assert await accounting.settle(first, Usage(3, 8), Outcome.OK, "pool") == 19
            yield url, store, accounting, key, bill
        finally:
            await store.close()


async def test_a_reservation_made_after_the_refusal_is_released(postgres_dsn: str) -> None:
    # The client's own socket timeout is long: only the gateway's deadline refuses.
    async with _settled_once(postgres_dsn, timeout_s=30.0) as (url, store, accounting, key, bill):
        with redis.Redis.from_url(url) as r:
            pid = int(r.info("server")["process_id"])
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreDown):
                await accounting.admit(key, bill, "late-one")
            assert accounting.calls.background  # the reservation call is still outstanding
        finally:
            os.kill(pid, signal.SIGCONT)
        # Redis now runs the queued script: the hold is made, then released at zero.
        await accounting.quiesce()
        with redis.Redis.from_url(url) as r:
            scope = r.hgetall(f"gw:scope:key:{key.key_id}")
        assert (int(scope[b"c"]), int(scope.get(b"r", 0))) == (19, 0)  # nothing left held
        await store.drain_ledger()
        rows = await store.spend(Dimension.KEY)
        assert [(r.cost_micro, r.requests) for r in rows] == [(19, 2)]  # the late one at 0


async def test_a_reservation_whose_call_timed_out_is_released_when_it_lands(
    postgres_dsn: str,
) -> None:
    """Redis hung past the client's own socket timeout: the reservation call fails, so its
    outcome is unknown, yet the script was sent and runs when Redis resumes. It was left
    to its lease, which charged the refused request its whole hold; now housekeeping
    settles it at zero once it has landed."""
    async with _settled_once(postgres_dsn, timeout_s=0.5) as (url, store, accounting, key, bill):
        with redis.Redis.from_url(url) as r:
            pid = int(r.info("server")["process_id"])
        os.kill(pid, signal.SIGSTOP)
        try:
            with pytest.raises(StoreDown):
                await accounting.admit(key, bill, "timed-out")
            await accounting.quiesce()  # the call ends at the client's 0.5 s socket timeout
            with contextlib.suppress(StoreDown):  # no release is made while Redis is hung
                await accounting.retry_settlements()
        finally:
            os.kill(pid, signal.SIGCONT)
        # Redis runs the queued script (the hold lands); housekeeping's next rounds settle
        # it at zero (one that finds it not landed yet keeps it for the next round).
        left = -1
        for _ in range(100):
            with contextlib.suppress(StoreDown):
                left = await accounting.retry_settlements()
            if left == 0:
                break
            await asyncio.sleep(0.05)
        assert left == 0
        with redis.Redis.from_url(url) as r:
            scope = r.hgetall(f"gw:scope:key:{key.key_id}")
        assert (int(scope[b"c"]), int(scope.get(b"r", 0))) == (19, 0)  # nothing left held
        await store.drain_ledger()
        rows = await store.spend(Dimension.KEY)
        assert [(r.cost_micro, r.requests) for r in rows] == [(19, 2)]  # refused one at 0
