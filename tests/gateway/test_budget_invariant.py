"""Hypothesis drives each store through random reservations, settlements (at or below
the hold), cancellations and lease expiries: committed spend never exceeds the budget, and
committed + reserved never does either, at any step."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from podserve.gateway.budget import Grant, HoldPlan, Usage
from podserve.gateway.money import Rate
from podserve.gateway.store.base import Hold, Labels, Outcome, ScopeSpec, Settlement, Store
from podserve.gateway.store.sqlite import SqliteStore
from tests.gateway.conftest import reset_shared_store

RATE = Rate(1000, 2000)
LIMITS = {"key:k": 2_000, "team:t": 1_500, "namespace:n": None}

step = st.one_of(
    st.tuples(st.just("reserve"), st.integers(0, 40), st.integers(1, 300), st.booleans()),
    st.tuples(st.just("settle"), st.integers(0, 50), st.floats(0, 1), st.booleans()),
    st.tuples(st.just("expire"), st.integers(0, 50), st.just(0.0), st.just(False)),
)


async def _sqlite_totals(store: SqliteStore) -> dict[str, tuple[int, int]]:
    rows = store._db.execute("SELECT name, committed, reserved FROM scopes").fetchall()
    return {name: (committed, reserved) for name, committed, reserved in rows}


async def _drive(
    store: Store,
    totals: Callable[[], Awaitable[dict[str, tuple[int, int]]]],
    steps: list[tuple[str, int, float, bool]],
) -> None:
    held: list[tuple[Hold, Grant]] = []
    now = time.time()
    for kind, a, b, flag in steps:
        if kind == "reserve":
            hold = Hold(
                uuid.uuid4().hex,
                HoldPlan(a, int(b), 1 if flag else int(b), RATE),
                tuple(ScopeSpec(n, lim) for n, lim in LIMITS.items()),
                (),
                (),
                now + (0 if flag else 600),
                Labels("k", "t", "n", "m"),
            )
            decision = await store.reserve(hold)
            if isinstance(decision, Grant):
                held.append((hold, decision))
        elif kind == "settle" and held:
            hold, grant = held.pop(a % len(held))
            used = int(grant.max_tokens * b)  # the upstream stops at or before the cap
            outcome = Outcome.CANCELLED if flag else Outcome.OK
            usage = Usage(hold.plan.prompt_tokens, used)
            cost = RATE.cost_micro(usage.prompt_tokens, usage.completion_tokens)
            await store.settle(Settlement(hold.reservation_id, usage, cost, "p", outcome, now))
        elif kind == "expire":
            await store.expire_leases(now + a)
        for name, (committed, reserved) in (await totals()).items():
            limit = LIMITS[name]
            assert reserved >= 0
            if limit is not None:
                assert committed + reserved <= limit, (name, committed, reserved)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, max_size=60))
def test_spend_never_exceeds_any_budget(steps: list[tuple[str, int, float, bool]]) -> None:
    async def run() -> None:
        store = SqliteStore(":memory:")
        await _drive(store, lambda: _sqlite_totals(store), steps)
        await store.close()

    asyncio.run(run())


def test_the_redis_scripts_keep_the_same_invariant(redis_url: str, postgres_dsn: str) -> None:
    """The same random runs against the Lua scripts (fewer: each starts a fresh store)."""
    import redis as sync_redis

    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    reset_shared_store(redis_url, postgres_dsn)  # the tables, once

    def flush() -> None:  # each example starts from an empty Redis and an empty ledger
        with sync_redis.Redis.from_url(redis_url) as r:
            r.flushall()

    @settings(max_examples=20, deadline=None)
    @given(st.lists(step, max_size=40))
    def check(steps: list[tuple[str, int, float, bool]]) -> None:
        flush()

        async def totals() -> dict[str, tuple[int, int]]:
            with sync_redis.Redis.from_url(redis_url) as r:
                found = {}
                for key in r.scan_iter("gw:scope:*"):
                    fields = r.hgetall(key)
                    found[key.decode().removeprefix("gw:scope:")] = (
                        int(fields.get(b"c", 0)),
                        int(fields.get(b"r", 0)),
                    )
                return found

        async def run() -> None:
            store = RedisPostgresStore(redis_url, postgres_dsn, timeout_s=2.0)
            await store.setup()
            try:
                await _drive(store, totals, steps)
            finally:
                flush()  # the queued ledger stays out of PostgreSQL: the next run's base
                await store.close()

        asyncio.run(run())

    check()
