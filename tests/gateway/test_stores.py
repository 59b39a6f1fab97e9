"""Both stores through the same cases, with real SQLite, Redis and PostgreSQL: the
reservation is atomic, settles to the real cost, expires as a lease, and rate windows hold.
A hold of nothing (an OIP request) is kept in memory, not in the store, on both."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from podserve.gateway.budget import Grant, HoldPlan, Refusal, RefusalReason, Usage
from podserve.gateway.keys import KeyRecord, hash_key, key_id_of, new_key
from podserve.gateway.limits import window_at
from podserve.gateway.money import Rate
from podserve.gateway.store.base import (
    Dimension,
    Hold,
    Labels,
    Outcome,
    ScopeSpec,
    Settlement,
    Store,
    WindowSpec,
)
from podserve.gateway.store.sqlite import SqliteStore
from tests.gateway.conftest import reset_shared_store

RATE = Rate.per_million_usd(*map(__import__("decimal").Decimal, ("1", "2")))  # 1000/2000 nano


@pytest.fixture(params=["sqlite", "redis-postgres", "redis-cluster-postgres"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    if request.param == "sqlite":
        found: Store = SqliteStore(tmp_path / "gw.db")
    else:
        from podserve.gateway.store.redis_postgres import RedisPostgresStore

        cluster = request.param == "redis-cluster-postgres"
        redis_url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
        dsn = request.getfixturevalue("postgres_dsn")
        reset_shared_store(redis_url, dsn)
        shared = RedisPostgresStore(redis_url, dsn, timeout_s=2.0, cluster=cluster)
        await shared.setup()
        found = shared
    yield found
    await found.close()
    if request.param == "redis-cluster-postgres":
        _assert_one_slot(request.getfixturevalue("redis_cluster_url"))


def _assert_one_slot(redis_url: str) -> None:
    """Every key the store made shares the `{gw}` tag's slot: on a cluster of several
    nodes a script touching any other key would be refused or run on the wrong node."""
    import redis

    with redis.Redis.from_url(redis_url) as r:
        keys = [k.decode() for k in r.scan_iter(count=1000)]
        slots = {r.execute_command("CLUSTER", "KEYSLOT", k) for k in keys}
    assert keys, "the test left no key in Redis"
    assert slots == {r_slot_of_tag()}, sorted(keys)


def r_slot_of_tag() -> int:
    """CRC16 (XMODEM) of "gw" mod 16384: the slot of every `{gw}:` key (cluster spec)."""
    crc = 0
    for byte in b"gw":
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc % 16384


def _hold(
    prompt: int,
    max_tokens: int,
    *,
    limit_micro: int | None,
    clamp: bool = False,
    rpm: int | None = None,
    tpm: int | None = None,
    lease_s: float = 600.0,
    reserved_at: float | None = None,
) -> Hold:
    window = window_at(time.time())
    return Hold(
        reservation_id=uuid.uuid4().hex,
        plan=HoldPlan(prompt, max_tokens, 1 if clamp else max_tokens, RATE),
        scopes=(ScopeSpec("key:k1", limit_micro), ScopeSpec("team:t", None)),
        rpm=()
        if rpm is None
        else (WindowSpec(window.counter("rpm", "k1"), "rpm:k1", rpm, window.resets_in_s),),
        tpm=()
        if tpm is None
        else (WindowSpec(window.counter("tpm", "k1"), "tpm:k1", tpm, window.resets_in_s),),
        lease_until=time.time() + lease_s,
        labels=Labels("k1", "t", "ns", "tiny-lm"),
        reserved_at=reserved_at,
    )


LABELS = Labels("k1", "t", "ns", "tiny-lm", "req-1")


def _settle(hold: Hold, prompt: int, completion: int, outcome: Outcome = Outcome.OK) -> Settlement:
    return Settlement(
        hold.reservation_id,
        Usage(prompt, completion),
        RATE.cost_micro(prompt, completion),
        "pool",
        outcome,
        time.time(),
    )


async def test_keys_round_trip(store: Store) -> None:
    key, digest = new_key()
    record = KeyRecord(
        key_id_of(digest),
        digest,
        "t",
        "ns",
        ("tiny-lm",),
        5_000_000,
        10,
        None,
        None,
        False,
        time.time(),
    )
    await store.create_key(record)
    assert await store.find_key(hash_key(key)) == record
    assert await store.find_key(hash_key("psk-other")) is None
    assert [r.key_id for r in await store.list_keys()] == [record.key_id]
    assert await store.revoke_key(record.key_id)
    found = await store.find_key(digest)
    assert found is not None
    assert found.revoked
    assert not await store.revoke_key("missing")


async def test_a_rotated_key_keeps_its_id_and_its_old_secret_only_for_the_grace(
    store: Store,
) -> None:
    old_key, old_digest = new_key()
    record = KeyRecord(
        key_id_of(old_digest), old_digest, "t", "ns", (), 5_000, None, None, None, False, 1.0
    )
    await store.create_key(record)
    _, digest_1 = new_key()
    until = time.time() + 60
    assert await store.rotate_key(record.key_id, digest_1, until)
    assert await store.find_key(digest_1) == replace(record, key_hash=digest_1)
    # the old secret: the same key (id, budget), expiring when its grace does
    assert await store.find_key(hash_key(old_key)) == replace(
        record, key_hash=digest_1, expires_at=until
    )
    # a second rotation without grace: only the newest secret works
    _, digest_2 = new_key()
    assert await store.rotate_key(record.key_id, digest_2, None)
    assert await store.find_key(digest_1) is None
    assert await store.find_key(old_digest) is None
    assert [r.key_hash for r in await store.list_keys()] == [digest_2]
    # an expiry of the key's own that comes first is kept for an old secret
    early = replace(record, key_id="k2", key_hash=hash_key("psk-a"), expires_at=10.0)
    await store.create_key(early)
    assert await store.rotate_key("k2", hash_key("psk-b"), until)
    found = await store.find_key(hash_key("psk-a"))
    assert found is not None
    assert found.expires_at == 10.0
    # unknown and revoked keys are not rotated
    assert not await store.rotate_key("missing", hash_key("psk-c"), None)
    assert await store.revoke_key("k2")
    assert not await store.rotate_key("k2", hash_key("psk-c"), None)
    assert await store.find_key(hash_key("psk-c")) is None


async def test_reserve_refuses_what_does_not_fit_and_settles_to_usage(store: Store) -> None:
    # 10 prompt + 100 output tokens = 10*1000 + 100*2000 nano = 210 micro-dollars.
    first = _hold(10, 100, limit_micro=300)
    granted = await store.reserve(first)
    assert granted == Grant(100, 210, 110)
    second = await store.reserve(_hold(10, 100, limit_micro=300))
    assert isinstance(second, Refusal)
    assert second.reason is RefusalReason.BUDGET
    assert second.retry_after_s == 1  # a reservation is outstanding
    assert await store.settle(_settle(first, 10, 20))  # real cost 50
    assert not await store.settle(_settle(first, 10, 20))  # settling twice does nothing
    assert isinstance(await store.reserve(_hold(10, 100, limit_micro=300)), Grant)
    rows = await store.spend(Dimension.KEY)
    assert [
        (r.group, r.cost_micro, r.prompt_tokens, r.completion_tokens, r.requests) for r in rows
    ] == [("k1", 50, 10, 20, 1)]


async def test_a_grant_tells_what_each_budget_has_left_unspent(store: Store) -> None:
    # Fail-open caps a replica's share with it: limit - committed per scope, the hold's
    # own and other outstanding holds left out (they may settle lower); None: no limit.
    first = _hold(10, 100, limit_micro=300)
    granted = await store.reserve(first)
    assert isinstance(granted, Grant)
    assert granted.unspent_micro == (300, None)
    assert await store.settle(_settle(first, 10, 20))  # 50 committed
    again = await store.reserve(_hold(10, 100, limit_micro=300))
    assert isinstance(again, Grant)
    assert again.unspent_micro == (250, None)


async def test_concurrent_reservations_never_overshoot(store: Store) -> None:
    holds = [_hold(10, 100, limit_micro=1000) for _ in range(20)]
    results = await asyncio.gather(*(store.reserve(h) for h in holds))
    granted = [r for r in results if isinstance(r, Grant)]
    assert len(granted) == 4  # 4 * 210 = 840 <= 1000 < 5 * 210
    assert sum(g.amount_micro for g in granted) <= 1000


async def test_clamp_grants_what_the_budget_covers(store: Store) -> None:
    granted = await store.reserve(_hold(10, 100, limit_micro=100, clamp=True))
    # (100 * 1000 - 10 * 1000) / 2000 = 45 output tokens
    assert granted == Grant(45, 100, 55)
    refused = await store.reserve(_hold(10, 100, limit_micro=100, clamp=True))
    assert isinstance(refused, Refusal)


async def test_expired_lease_is_charged_in_full(store: Store) -> None:
    hold = _hold(10, 100, limit_micro=1000, lease_s=-1.0)
    assert isinstance(await store.reserve(hold), Grant)
    assert await store.expire_leases(time.time()) == 1
    assert not await store.settle(_settle(hold, 10, 5))  # too late: already charged
    rows = await store.spend(Dimension.MODEL)
    assert [(r.group, r.cost_micro, r.completion_tokens) for r in rows] == [("tiny-lm", 210, 100)]


async def test_spend_since_a_time_counts_only_the_later_requests(store: Store) -> None:
    then = time.time()
    old = _hold(10, 100, limit_micro=None, reserved_at=then - 86_400)
    new = _hold(10, 5, limit_micro=None, reserved_at=then)
    for hold in (old, new):
        assert isinstance(await store.reserve(hold), Grant)
    settled_old = _settle(old, 10, 100)
    assert await store.settle(replace(settled_old, at=then - 86_400))  # yesterday
    assert await store.settle(replace(_settle(new, 10, 5), at=then))
    everything = await store.spend(Dimension.MODEL)
    assert [(r.group, r.cost_micro, r.requests) for r in everything] == [("tiny-lm", 230, 2)]
    today = await store.spend(Dimension.MODEL, then - 3600)
    assert [(r.group, r.cost_micro, r.requests) for r in today] == [("tiny-lm", 20, 1)]
    assert await store.spend(Dimension.MODEL, then + 1) == []


async def test_rpm_and_tpm_windows(store: Store) -> None:
    assert isinstance(await store.reserve(_hold(1, 1, limit_micro=None, rpm=2)), Grant)
    assert isinstance(await store.reserve(_hold(1, 1, limit_micro=None, rpm=2)), Grant)
    refused = await store.reserve(_hold(1, 1, limit_micro=None, rpm=2))
    assert isinstance(refused, Refusal)
    assert refused.reason is RefusalReason.RPM
    assert 1 <= refused.retry_after_s <= 60
    first = _hold(10, 50, limit_micro=None, tpm=100)
    assert isinstance(await store.reserve(first), Grant)  # 60 of 100 tokens held
    assert isinstance(await store.reserve(_hold(10, 50, limit_micro=None, tpm=100)), Refusal)
    await store.settle(_settle(first, 10, 5))  # 15 used: 45 go back to the window
    assert isinstance(await store.reserve(_hold(10, 50, limit_micro=None, tpm=100)), Grant)


async def test_a_tpm_refusal_behind_outstanding_holds_may_fit_in_a_second(store: Store) -> None:
    # A hold counts its whole output cap in the window until it settles: a refusal then
    # is worth a retry in a second (the gateway waits for settlements, as for budgets),
    # not at the window's end, up to 60 s away.
    first = _hold(10, 50, limit_micro=None, tpm=100)
    assert isinstance(await store.reserve(first), Grant)  # 60 of 100 tokens held
    refused = await store.reserve(_hold(10, 50, limit_micro=None, tpm=100))
    assert isinstance(refused, Refusal)
    assert refused.reason is RefusalReason.TPM
    assert (refused.retry_after_s, refused.may_fit_later) == (1, True)
    await store.settle(_settle(first, 10, 40))  # 50 used, nothing held any more
    spent = await store.reserve(_hold(10, 50, limit_micro=None, tpm=100))
    assert isinstance(spent, Refusal)  # 50 used + 60 > 100, and nothing will come back
    assert spent.may_fit_later is False
    at_reset = max(1, int(-(-window_at(time.time()).resets_in_s // 1)))
    assert at_reset <= spent.retry_after_s <= at_reset + 1  # the window's end, not 1 s


async def test_a_charge_after_the_fact_is_recorded_once(store: Store) -> None:
    from podserve.gateway.store.base import Charge

    hold = _hold(10, 100, limit_micro=300)
    charge = Charge(_settle(hold, 10, 20), ("key:k1", "team:t"), hold.labels)
    await store.charge(charge)
    await store.charge(charge)  # replayed: ignored
    rows = await store.spend(Dimension.KEY)
    assert [(r.cost_micro, r.requests) for r in rows] == [(50, 1)]
    # The budget counts it: 300 - 50 leaves room for one hold of 210, not two.
    assert isinstance(await store.reserve(_hold(10, 100, limit_micro=300)), Grant)
    assert isinstance(await store.reserve(_hold(10, 100, limit_micro=300)), Refusal)


async def test_a_restarted_redis_rebuilds_committed_spend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Redis loses everything; the next reservation sees the spend in PostgreSQL."""
    import redis

    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    redis_url = request.getfixturevalue("redis_url")
    dsn = request.getfixturevalue("postgres_dsn")
    reset_shared_store(redis_url, dsn)
    store = RedisPostgresStore(redis_url, dsn, timeout_s=2.0)
    await store.setup()
    first = _hold(10, 100, limit_micro=300)
    assert isinstance(await store.reserve(first), Grant)
    await store.settle(_settle(first, 10, 100))  # 210 spent
    await store.drain_ledger()
    with redis.Redis.from_url(redis_url) as r:
        r.flushall()
    assert isinstance(await store.reserve(_hold(10, 100, limit_micro=300)), Refusal)
    await store.close()


async def test_replicas_setting_up_a_fresh_database_at_once_all_start(
    request: pytest.FixtureRequest,
) -> None:
    """A Deployment's replicas start together on an empty PostgreSQL: concurrent
    `CREATE TABLE IF NOT EXISTS` raced in the catalog (UniqueViolation on
    pg_type_typname_nsp_index, 10 of 10 tries with six replicas) until the schema took an
    advisory lock."""
    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    redis_url = request.getfixturevalue("redis_url")
    dsn = request.getfixturevalue("postgres_dsn")
    for _ in range(3):
        reset_shared_store(redis_url, dsn)
        replicas = [RedisPostgresStore(redis_url, dsn, timeout_s=5.0) for _ in range(6)]
        try:
            await asyncio.gather(*(replica.setup() for replica in replicas))
            _, digest = new_key()
            await replicas[0].create_key(
                KeyRecord(key_id_of(digest), digest, "t", "ns", (), None, None, None, None,
                          False, time.time())
            )  # fmt: skip
            assert await replicas[5].find_key(digest) is not None
        finally:
            for replica in replicas:
                await replica.close()


@pytest.mark.parametrize("limit_micro", [300, None])
async def test_a_hold_of_nothing_that_costs_something_is_still_charged(
    store: Store, limit_micro: int | None
) -> None:
    """A reservation of 0 (no tokens estimated) writes no scope row (on SQLite, no row at
    all; without a limit it reads nothing either); its settlement must still charge the
    budget when the upstream reports a cost."""
    nothing = _hold(0, 0, limit_micro=limit_micro)
    assert isinstance(await store.reserve(nothing), Grant)
    assert await store.settle(_settle(nothing, 10, 100))  # 210 spent
    assert isinstance(await store.reserve(_hold(10, 100, limit_micro=300)), Refusal)


async def _kept(request: pytest.FixtureRequest, store: Store) -> tuple[int, int, list[Any]]:
    """What the store itself keeps: open reservations (SQLite rows; Redis `res:` hashes),
    leases (SQLite: the same rows; Redis: `leases` members), and the ledger rows not yet
    in PostgreSQL (SQLite: the ledger), as dicts with `at` and `reserved_at` as floats."""
    kind = request.node.callspec.params["store"]
    if kind == "sqlite":
        assert isinstance(store, SqliteStore)
        db = store._db
        reservations = db.execute("SELECT COUNT(*) FROM reservations").fetchone()[0]
        cur = db.execute("SELECT * FROM ledger ORDER BY reservation_id")
        names = [d[0] for d in cur.description]
        return reservations, reservations, [dict(zip(names, r, strict=True)) for r in cur]
    import redis

    cluster = kind == "redis-cluster-postgres"
    prefix = "{gw}:" if cluster else "gw:"
    with redis.Redis.from_url(
        request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    ) as r:
        hashes = len(list(r.scan_iter(match=f"{prefix}res:*", count=1000)))
        leases = int(r.zcard(f"{prefix}leases"))
        queued = [json.loads(row) for row in r.lrange(f"{prefix}ledger", 0, -1)]
    for row in queued:  # the scripts queue times as strings, the store as numbers
        for field in ("at", "reserved_at"):
            row[field] = None if row.get(field) is None else float(row[field])
    return hashes, leases, sorted(queued, key=lambda row: str(row["reservation_id"]))


async def test_a_hold_of_nothing_is_kept_in_memory_and_settles_to_one_row(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """A reservation of 0 with no tokens in a window (an OIP request) writes no row, no
    hash, no lease (redis_unheld, sqlite_ops); its settlement queues one ledger row, the
    same row a priced settlement writes. A priced hold still gets its row or hash and lease."""
    then = time.time()
    nothing = replace(_hold(0, 0, limit_micro=None, rpm=5, reserved_at=then - 1), labels=LABELS)
    priced = _hold(10, 100, limit_micro=1000)
    assert await store.reserve(nothing) == Grant(0, 0, 0)
    assert await store.reserve(priced) == Grant(100, 210, 110)
    assert await _kept(request, store) == (1, 1, [])  # the priced hold's alone
    assert await store.settle(replace(_settle(nothing, 0, 0), at=then))
    assert not await store.settle(_settle(nothing, 0, 0))  # settled: nothing to settle
    assert await store.settle(_settle(priced, 10, 20))
    open_holds, leases, rows = await _kept(request, store)
    assert (open_holds, leases) == (0, 0)
    by_id = {row["reservation_id"]: row for row in rows}
    assert sorted(by_id) == sorted([nothing.reservation_id, priced.reservation_id])
    assert by_id[nothing.reservation_id] == {
        "reservation_id": nothing.reservation_id,
        "request_id": "req-1",
        "at": then,
        "reserved_at": then - 1,
        "key_id": "k1",
        "team": "t",
        "namespace": "ns",
        "model": "tiny-lm",
        "upstream": "pool",
        "prompt_tokens": 0,
        "completion_tokens": 0,
        "cost_micro": 0,
        "status": "ok",
    }
    assert by_id[priced.reservation_id]["cost_micro"] == 50
    spent = await store.spend(Dimension.KEY)
    assert [(r.cost_micro, r.requests) for r in spent] == [(50, 2)]


async def test_holds_of_nothing_are_counted_and_refused_by_their_windows(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """No hash does not mean no limit: the rpm window counts each hold of nothing at
    reserve and refuses past its limit, exactly as for priced holds; a tpm window is
    charged none of their (zero) tokens."""
    holds = [_hold(0, 0, limit_micro=None, rpm=2, tpm=100) for _ in range(3)]
    first, second, third = [await store.reserve(h) for h in holds]
    assert first == second == Grant(0, 0, 0)
    assert isinstance(third, Refusal)
    assert third.reason is RefusalReason.RPM
    assert (await _kept(request, store))[:2] == (0, 0)
    for hold in holds[:2]:
        assert await store.settle(_settle(hold, 0, 0))
    # A settlement gives no request back to the rpm window...
    assert isinstance(await store.reserve(_hold(0, 0, limit_micro=None, rpm=2)), Refusal)
    # ...and the tpm window holds all its 100 tokens for a priced request.
    assert await store.reserve(_hold(0, 100, limit_micro=None, tpm=100)) == Grant(100, 200, 100)


async def test_an_expired_hold_of_nothing_is_ledgered_at_zero(
    store: Store, request: pytest.FixtureRequest
) -> None:
    """A hold of nothing (an OIP request) whose lease runs out is settled like any other,
    by this process's lease sweep: one `expired` ledger row, charged 0; a late settlement
    finds it gone."""
    nothing = replace(_hold(0, 0, limit_micro=None, lease_s=-1.0, reserved_at=5.0), labels=LABELS)
    assert await store.reserve(nothing) == Grant(0, 0, 0)
    assert (await _kept(request, store))[:2] == (0, 0)
    now = time.time()
    assert await store.expire_leases(now) == 1
    assert await store.expire_leases(now) == 0
    assert not await store.settle(_settle(nothing, 0, 0))
    _, _, [row] = await _kept(request, store)
    assert (row["status"], row["cost_micro"], row["at"], row["reserved_at"]) == (
        "expired",
        0,
        now,
        5.0,
    )
    assert (row["upstream"], row["request_id"]) == ("", "req-1")
    rows = await store.spend(Dimension.KEY)
    assert [(r.cost_micro, r.requests) for r in rows] == [(0, 1)]


async def _only_the_priced_hold_was_charged(successor: Store) -> None:
    """After a crashed store's leases expired: its priced hold (210 µ$) is ledgered and
    counted against the budget; its hold of nothing left no trace."""
    rows = await successor.spend(Dimension.KEY)
    assert [(r.cost_micro, r.requests) for r in rows] == [(210, 1)]
    # The budget counts the expired hold: 1000 - 210 leaves room for 3 more, not 4.
    more = [await successor.reserve(_hold(10, 100, limit_micro=1000)) for _ in range(4)]
    assert [isinstance(r, Grant) for r in more] == [True, True, True, False]


async def test_sqlite_a_crashed_gateway_leaves_only_its_priced_holds(tmp_path: Path) -> None:
    """What a crash costs (sqlite_ops): a priced reservation is a row, so the next gateway
    on the file charges it in full when its lease runs out; a hold of nothing lived in the
    crashed process only, and is neither charged (it would be 0) nor ledgered."""
    crashed = SqliteStore(tmp_path / "gw.db")
    priced = _hold(10, 100, limit_micro=1000, lease_s=-1.0)
    nothing = _hold(0, 0, limit_micro=None, lease_s=-1.0)
    assert isinstance(await crashed.reserve(priced), Grant)
    assert isinstance(await crashed.reserve(nothing), Grant)
    # No close(): the next gateway opens the same file as if this process had died.
    successor = SqliteStore(tmp_path / "gw.db")
    try:
        assert await successor.expire_leases(time.time()) == 1
        await _only_the_priced_hold_was_charged(successor)
    finally:
        await successor.close()
        await crashed.close()


@pytest.mark.parametrize("cluster", [False, True], ids=["redis", "redis-cluster"])
async def test_redis_a_crashed_replica_leaves_only_its_priced_holds(
    request: pytest.FixtureRequest, cluster: bool
) -> None:
    """What a crash costs (redis_unheld): a priced reservation is a hash with a lease, so
    another replica charges it in full when the lease runs out; a hold of nothing lived in
    the crashed replica only, and is neither charged (it would be 0) nor ledgered."""
    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    redis_url = request.getfixturevalue("redis_cluster_url" if cluster else "redis_url")
    dsn = request.getfixturevalue("postgres_dsn")
    reset_shared_store(redis_url, dsn)
    crashed = RedisPostgresStore(redis_url, dsn, timeout_s=2.0, cluster=cluster)
    successor = RedisPostgresStore(redis_url, dsn, timeout_s=2.0, cluster=cluster)
    try:
        await crashed.setup()
        await successor.setup()
        priced = _hold(10, 100, limit_micro=1000, lease_s=-1.0)
        nothing = _hold(0, 0, limit_micro=None, lease_s=-1.0)
        assert isinstance(await crashed.reserve(priced), Grant)
        assert isinstance(await crashed.reserve(nothing), Grant)
        assert await successor.expire_leases(time.time()) == 1
        import redis

        with redis.Redis.from_url(redis_url) as r:  # the crashed writer's lock runs out (5 s)
            r.delete(("{gw}:" if cluster else "gw:") + "ledger:writer")
        await _only_the_priced_hold_was_charged(successor)
    finally:
        await successor.close()
        await crashed.close()


async def test_redis_a_hold_of_nothing_whose_row_failed_stays_open(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis fails the RPUSH of a settlement: the hold stays open in memory, so a retried
    settlement writes its row (else the sweep would), and the failure is reported."""
    import redis.exceptions

    from podserve.gateway.store.base import StoreUnavailable
    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    redis_url, dsn = request.getfixturevalue("redis_url"), request.getfixturevalue("postgres_dsn")
    reset_shared_store(redis_url, dsn)
    store = RedisPostgresStore(redis_url, dsn, timeout_s=2.0)
    try:
        await store.setup()
        nothing = _hold(0, 0, limit_micro=None)
        assert isinstance(await store.reserve(nothing), Grant)

        async def refused(*_: object) -> int:
            raise redis.exceptions.ConnectionError("connection refused")

        with monkeypatch.context() as patched:
            patched.setattr(store._redis, "rpush", refused)
            with pytest.raises(StoreUnavailable):
                await store.settle(_settle(nothing, 0, 0))
        assert await store.settle(_settle(nothing, 0, 0))
        rows = await store.spend(Dimension.KEY)
        assert [(r.cost_micro, r.requests) for r in rows] == [(0, 1)]
    finally:
        await store.close()


async def test_renewed_leases_do_not_expire_and_settled_ones_stay_gone(store: Store) -> None:
    """A replica renews the leases of the holds it still has in flight (gateway/leases.py):
    a renewed hold survives the sweep past its first lease and settles at its real cost;
    renewing a settled hold brings nothing back. Holds of nothing too (kept in memory)."""
    now = time.time()
    priced = _hold(10, 20, limit_micro=1000, lease_s=1.0)
    nothing = replace(
        _hold(0, 0, limit_micro=None, lease_s=1.0), plan=HoldPlan(0, 0, 0, Rate(0, 0))
    )
    done = _hold(10, 20, limit_micro=1000, lease_s=1.0)
    for hold in (priced, nothing, done):
        assert isinstance(await store.reserve(hold), Grant)
    assert await store.settle(_settle(done, 10, 5))
    ids = [priced.reservation_id, nothing.reservation_id, done.reservation_id]
    assert await store.renew_leases(ids, now + 100) == 2
    assert await store.expire_leases(now + 50) == 0  # past the first lease, not the renewal
    assert await store.settle(_settle(priced, 10, 7))
    assert await store.settle(_settle(nothing, 0, 0))
    assert await store.renew_leases(ids, now + 200) == 0
    assert await store.expire_leases(now + 300) == 0  # nothing was brought back
    assert await store.renew_leases([], now) == 0
