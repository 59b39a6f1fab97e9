"""A store taken for down: after `FAILURES` failed calls in a row, admission calls are
refused without reaching the store until `OPEN_S` has passed; then one probe decides.

In process, the breaker's decisions are driven by an injected clock and a store double
whose calls can fail on demand (only the call-counting is a double: the Redis behaviour
itself is tested below). Then with a real Redis: hung (SIGSTOP), a gateway stops leaving
calls behind on it; stopped and started again, a gateway process answers 503 + Retry-After
throughout and serves again once Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import redis

from podserve.config.gateway_config import load_gateway_config
from podserve.core.errors import InvalidInput
from podserve.gateway.accounting import Accounting
from podserve.gateway.breaker import BreakerState
from podserve.gateway.errors import StoreDown
from podserve.gateway.keys import KeyRecord, key_id_of, new_key
from podserve.gateway.store.base import StoreUnavailable
from podserve.gateway.store_calls import FAILURES, MIN_SPAN_S, OPEN_S, StoreCalls
from podserve.gateway.wire import Billable, Endpoint, billable
from tests.gateway.conftest import Pods, base_config, reset_shared_store
from tests.gateway.support import GatewayProcess, make_key, redis_server
from tests.support.server import wait_until


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Store:
    """Counts the calls that reach it; each fails while `down`."""

    def __init__(self) -> None:
        self.calls = 0
        self.down = False

    def op(self) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            self.calls += 1
            if self.down:
                raise StoreUnavailable("connection refused")
            return "ok"

        return call


def _state(calls: StoreCalls) -> BreakerState:
    return calls.breaker.state


# Failures this far apart span MIN_SPAN_S by the FAILURES-th.
STEP_S = MIN_SPAN_S / (FAILURES - 1)


async def _fail_in_a_row(calls: StoreCalls, store: Store, clock: Clock) -> None:
    """FAILURES failed calls, STEP_S apart: what an outage looks like to the breaker."""
    store.down = True
    for index in range(FAILURES):
        if index:
            clock.now += STEP_S
        with pytest.raises(StoreDown):
            await calls.call(store.op())


async def test_calls_in_a_row_failing_open_the_breaker_and_a_probe_closes_it() -> None:
    clock, store = Clock(), Store()
    calls = StoreCalls(timeout_s=1.0, in_process=False, monotonic=clock)
    assert await calls.call(store.op()) == "ok"
    await _fail_in_a_row(calls, store, clock)
    assert store.calls == 1 + FAILURES
    # taken for down: refused at once, the store not called
    with pytest.raises(StoreDown) as refused:
        await calls.call(store.op())
    assert refused.value.retry_after_s == 1
    assert store.calls == 1 + FAILURES
    # a settlement is never refused by it: it reaches the store
    with pytest.raises(StoreDown):
        await calls.call(store.op(), refusable=False)
    assert store.calls == 2 + FAILURES
    # after OPEN_S one probe goes through; it fails: open again for another OPEN_S
    clock.now += OPEN_S
    with pytest.raises(StoreDown):
        await calls.call(store.op())
    assert store.calls == 3 + FAILURES
    with pytest.raises(StoreDown):
        await calls.call(store.op())
    assert store.calls == 3 + FAILURES
    # the store is back; the next probe closes the breaker and calls flow again
    store.down = False
    clock.now += OPEN_S
    assert await calls.call(store.op()) == "ok"
    assert _state(calls) is BreakerState.CLOSED
    assert await calls.call(store.op()) == "ok"
    assert store.calls == 5 + FAILURES


async def _taken_for_down(clock: Clock, store: Store) -> StoreCalls:
    """Store calls whose breaker FAILURES failed calls in a row have opened."""
    calls = StoreCalls(timeout_s=5.0, in_process=False, monotonic=clock)
    await _fail_in_a_row(calls, store, clock)
    assert _state(calls) is BreakerState.OPEN
    return calls


async def test_a_settlement_that_succeeds_closes_the_breaker() -> None:
    clock, store = Clock(), Store()
    calls = await _taken_for_down(clock, store)
    store.down = False
    assert await calls.call(store.op(), refusable=False) == "ok"
    assert _state(calls) is BreakerState.CLOSED


async def test_a_probe_whose_request_is_cancelled_still_decides() -> None:
    """The client of the request whose call is the probe goes away: the call runs on, and
    its outcome closes the breaker (before, the probe stayed open and every later call
    was refused)."""
    clock, store = Clock(), Store()
    calls = await _taken_for_down(clock, store)
    store.down = False
    clock.now += OPEN_S
    gate = asyncio.Event()

    async def held() -> str:
        await gate.wait()
        return "ok"

    probe = asyncio.create_task(calls.call(held))
    await asyncio.sleep(0)  # the probe's call is made
    assert _state(calls) is BreakerState.HALF_OPEN
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    gate.set()  # the store answers the call nobody waits for any more
    for _ in range(3):
        await asyncio.sleep(0)
    assert _state(calls) is BreakerState.CLOSED
    assert await calls.call(store.op()) == "ok"


async def test_a_brownout_does_not_open_it_only_a_streak_that_lasts() -> None:
    """Failures in a row shorter than MIN_SPAN_S (a burst of slow calls between good
    ones, as a loaded store gives at a high request rate) leave the breaker closed."""
    clock, store = Clock(), Store()
    calls = StoreCalls(timeout_s=1.0, in_process=False, monotonic=clock)
    for _ in range(3):  # bursts of failures, a success between them
        store.down = True
        for _ in range(FAILURES + 2):
            clock.now += STEP_S / 4
            with pytest.raises(StoreDown):
                await calls.call(store.op())
        assert _state(calls) is BreakerState.CLOSED
        store.down = False
        assert await calls.call(store.op()) == "ok"
    # failures that go on past MIN_SPAN_S: an outage
    store.down = True
    while _state(calls) is BreakerState.CLOSED:
        clock.now += STEP_S / 4
        with pytest.raises(StoreDown):
            await calls.call(store.op())
    opened_after = round(MIN_SPAN_S / (STEP_S / 4)) + 1  # failures, STEP_S/4 apart
    assert store.calls == 3 * (FAILURES + 3) + opened_after


async def test_an_answer_that_is_not_an_outage_counts_as_the_store_up() -> None:
    """Another replica rebuilding Redis's counters: the call fails, but the store
    answered, so it ends a streak of failures and a probe (which would otherwise stay
    in flight for ever)."""

    class Rebuilding(StoreUnavailable):
        store_down = False

    async def rebuilding() -> str:
        raise Rebuilding("another replica is rebuilding the budget counters")

    clock, store = Clock(), Store()
    calls = await _taken_for_down(clock, store)
    clock.now += OPEN_S
    with pytest.raises(StoreDown):  # the probe: refused, as every such call is
        await calls.call(rebuilding)
    assert _state(calls) is BreakerState.CLOSED
    for _ in range(10):  # rebuilding for much longer than MIN_SPAN_S: never opened
        clock.now += STEP_S
        with pytest.raises(StoreDown):
            await calls.call(rebuilding)
    assert _state(calls) is BreakerState.CLOSED


async def test_the_in_process_store_has_the_breaker_too() -> None:
    """SQLite cannot hang on a network, but a file another writer holds locked fails each
    transaction only after the busy timeout, waited on the event loop: once taken for
    down, admission calls stop waiting it out."""
    clock, store = Clock(), Store()
    calls = StoreCalls(timeout_s=1.0, in_process=True, monotonic=clock)
    await _fail_in_a_row(calls, store, clock)
    with pytest.raises(StoreDown):
        await calls.call(store.op())
    assert store.calls == FAILURES
    store.down = False
    clock.now += OPEN_S
    assert await calls.call(store.op()) == "ok"
    assert _state(calls) is BreakerState.CLOSED


CONFIG = """
prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}
storeTimeoutMs: 50
"""


@contextlib.asynccontextmanager
async def _on_redis(
    postgres_dsn: str, clock: Clock, timeout_s: float
) -> AsyncIterator[tuple[str, Accounting, KeyRecord, Billable]]:
    """Accounting on a real Redis + PostgreSQL store, on `clock`, with a key and a bill
    (3 prompt bytes x 1 + 8 output tokens x 2 = 19 micro-dollars held)."""
    from podserve.gateway.store.redis_postgres import RedisPostgresStore

    with redis_server() as url:
        reset_shared_store(url, postgres_dsn)
        store = RedisPostgresStore(url, postgres_dsn, timeout_s=timeout_s)
        await store.setup()
        try:
            accounting = Accounting(load_gateway_config(CONFIG), store, monotonic=clock)
            _, digest = new_key()
            key = KeyRecord(
                key_id_of(digest), digest, "t", "ns", (), 10_000, None, None, None, False,
                time.time(),
            )  # fmt: skip
            await store.create_key(key)
            bill = billable({"model": "m", "prompt": "abc", "max_tokens": 8}, Endpoint.COMPLETIONS)
            yield url, accounting, key, bill
        finally:
            await store.close()


async def test_a_hung_redis_is_left_alone_once_taken_for_down(postgres_dsn: str) -> None:
    """Without the breaker each refused request left one more reservation call waiting on
    the stopped Redis; with it, only the first FAILURES do, and the probe after OPEN_S
    finds Redis answering again."""
    clock = Clock()
    async with _on_redis(postgres_dsn, clock, timeout_s=30.0) as (url, accounting, key, bill):
        await accounting.admit(key, bill)  # connections warm, scripts loaded
        with redis.Redis.from_url(url) as r:
            pid = int(r.info("server")["process_id"])
        os.kill(pid, signal.SIGSTOP)
        try:
            for index in range(FAILURES + 3):
                if index:
                    clock.now += STEP_S
                with pytest.raises(StoreDown):
                    await accounting.admit(key, bill)
            # the calls left waiting on the hung Redis: the first FAILURES only
            assert len(accounting.calls.background) == FAILURES
        finally:
            os.kill(pid, signal.SIGCONT)
        await accounting.quiesce()  # Redis answers the queued calls; their holds released
        clock.now += OPEN_S
        assert (await accounting.admit(key, bill)).reservation_id  # the probe, admitted
        assert _state(accounting.calls) is BreakerState.CLOSED


async def test_a_rebuild_by_another_replica_does_not_open_it(postgres_dsn: str) -> None:
    """Redis restarted empty and another replica holds the rebuild lock: reservations
    fail closed until the rebuild is done, and the breaker stays closed meanwhile, so
    they are admitted as soon as it is."""
    clock = Clock()
    async with _on_redis(postgres_dsn, clock, timeout_s=5.0) as (url, accounting, key, bill):
        with redis.Redis.from_url(url) as r:
            r.flushall()  # restarted empty
            r.set("gw:bootstrap", "another-replica", px=60_000)  # it is rebuilding
            for _ in range(FAILURES + 5):
                clock.now += STEP_S
                with pytest.raises(StoreDown):
                    await accounting.admit(key, bill)
            assert _state(accounting.calls) is BreakerState.CLOSED
            r.delete("gw:bootstrap")  # it gave up (or crashed): this replica rebuilds
        assert (await accounting.admit(key, bill)).reservation_id


def test_a_gateway_refuses_while_redis_is_down_and_serves_when_it_is_back(
    pods: Pods, postgres_dsn: str, tmp_path: Path
) -> None:
    body = {"model": "tiny-lm", "prompt": "hi", "max_tokens": 2}
    with redis_server() as url:
        reset_shared_store(url, postgres_dsn)
        store = {"kind": "redis-postgres", "redis": url, "postgres": postgres_dsn}
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with GatewayProcess(base_config(pods, store=store, storeTimeoutMs=200), tmp_path) as gw:
            key, _ = make_key(gw.config_path, team="breaker")
            headers = {"authorization": f"Bearer {key}"}
            with httpx.Client(base_url=gw.url, timeout=30) as http:
                assert http.post("/v1/completions", json=body, headers=headers).status_code == 200
                with redis.Redis.from_url(url) as r:
                    r.shutdown(nosave=True)
                replies: list[httpx.Response] = []

                def taken_for_down() -> bool:
                    # requests until the failures in a row have spanned MIN_SPAN_S
                    replies.append(http.post("/v1/completions", json=body, headers=headers))
                    return any(
                        str(r.get("msg")).startswith("store taken for down") for r in gw.logs
                    )

                wait_until(taken_for_down, timeout_s=20, what="the store taken for down")
                assert len(replies) >= FAILURES
                assert {(r.status_code, r.headers["retry-after"]) for r in replies} == {(503, "1")}
                with redis_server(port):  # back, empty, on the same port
                    wait_until(
                        lambda: (
                            http.post("/v1/completions", json=body, headers=headers).status_code
                            == 200
                        ),
                        timeout_s=20,
                        what="a request admitted once Redis is back",
                    )
                    assert gw.wait_log(lambda r: r.get("msg") == "store answering again")


def test_the_breaker_is_configured_by_store_breaker() -> None:
    from podserve.gateway.store.sqlite import SqliteStore

    config = load_gateway_config("storeBreaker: {failures: 1, openS: 5, minSpanS: 0.5}\n")
    accounting = Accounting(config, SqliteStore(":memory:"))
    breaker = accounting.calls.breaker
    assert (breaker.failures, breaker.open_s, breaker.min_span_s) == (1, 5.0, 0.5)
    default = Accounting(load_gateway_config(""), SqliteStore(":memory:"))
    assert default.calls.breaker.min_span_s == MIN_SPAN_S
    for bad in ("{failures: 0}", "{openS: 0}", "{openS: 61}", "{failure: 2}", "{minSpanS: -1}"):
        with pytest.raises(InvalidInput, match="storeBreaker"):
            load_gateway_config(f"storeBreaker: {bad}\n")


async def test_a_refusal_asks_the_client_back_when_the_breaker_may_let_it_through() -> None:
    """Retry-After is the open period's rest, rounded up: with `openS: 10`, a client told
    `1` would be refused nine more times."""
    clock, store = Clock(), Store()
    calls = StoreCalls(timeout_s=1.0, in_process=False, monotonic=clock, open_s=10.0)
    await _fail_in_a_row(calls, store, clock)
    with pytest.raises(StoreDown) as refused:
        await calls.call(store.op())
    assert refused.value.retry_after_s == 10
    clock.now += 7.5
    with pytest.raises(StoreDown) as refused:
        await calls.call(store.op())
    assert refused.value.retry_after_s == 3
    clock.now += 2.4  # 0.1 s left: never 0, a client would come straight back
    with pytest.raises(StoreDown) as refused:
        await calls.call(store.op())
    assert refused.value.retry_after_s == 1


async def test_the_span_is_the_configured_one() -> None:
    """`minSpanS: 0` opens on failures in a row however close together; a longer span
    keeps the same streak from opening it."""
    for span_s, opens in ((0.0, True), (MIN_SPAN_S * 4, False)):
        clock, store = Clock(), Store()
        calls = StoreCalls(timeout_s=1.0, in_process=False, monotonic=clock, min_span_s=span_s)
        await _fail_in_a_row(calls, store, clock)  # spans MIN_SPAN_S
        assert (_state(calls) is BreakerState.OPEN) is opens


async def test_a_settlement_the_store_did_not_take_is_retried_not_charged_in_full(
    tmp_path: Path,
) -> None:
    """Another writer holds the SQLite file locked (a backup, a `sqlite3` shell) while a
    request settles: the settlement fails after the busy timeout, not 5 s later on the
    event loop; housekeeping settles it once the lock is gone, at its real usage, where
    before its lease charged the whole hold."""
    import sqlite3

    from podserve.gateway.budget import Usage
    from podserve.gateway.store.base import Outcome
    from podserve.gateway.store.sqlite import SqliteStore

    path = tmp_path / "gateway.db"
    store = SqliteStore(path, busy_timeout_s=0.05)
    accounting = Accounting(load_gateway_config(CONFIG), store)
    _, digest = new_key()
    key = KeyRecord(
        key_id_of(digest), digest, "t", "ns", (), 10_000, None, None, None, False, time.time()
    )
    await store.create_key(key)
    bill = billable({"model": "m", "prompt": "abc", "max_tokens": 8}, Endpoint.COMPLETIONS)
    admission = await accounting.admit(key, bill)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the write lock, held
    try:
        assert await accounting.settle(admission, Usage(3, 2), Outcome.OK, "up") == 7
        with pytest.raises(StoreDown):
            await accounting.retry_settlements()  # still locked: kept for the next round
        # while it is locked, admission fails closed
        with pytest.raises(StoreDown):
            await accounting.admit(key, bill)
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await accounting.retry_settlements() == 0
    rows = sqlite3.connect(path).execute(
        "SELECT prompt_tokens, completion_tokens, cost_micro, status FROM ledger"
    )
    assert list(rows) == [(3, 2, 7, "ok")]


async def _sqlite_accounting(
    tmp_path: Path, config: str, budget_micro: int | None = None, tpm: int | None = None
) -> tuple[Path, Accounting, KeyRecord]:
    from podserve.gateway.store.sqlite import SqliteStore

    path = tmp_path / "gateway.db"
    store = SqliteStore(path, busy_timeout_s=0.05)
    accounting = Accounting(load_gateway_config(CONFIG + config), store)
    _, digest = new_key()
    key = KeyRecord(
        key_id_of(digest), digest, "t", "ns", (), budget_micro, None, tpm, None, False, time.time()
    )
    await store.create_key(key)
    return path, accounting, key


async def test_fail_open_does_not_hand_a_spent_budget_out_again(tmp_path: Path) -> None:
    """A key the store refused as spent got a fresh share of its budget when the store
    went down (a probe: 140% of the budget spent); it stays refused."""
    import sqlite3

    from podserve.gateway.budget import Usage
    from podserve.gateway.errors import OverLimit
    from podserve.gateway.store.base import Outcome

    path, accounting, key = await _sqlite_accounting(
        tmp_path, "failOpen: {enabled: true, replicas: 1}\n", budget_micro=23
    )
    bill = billable({"model": "m", "prompt": "abc", "max_tokens": 8}, Endpoint.COMPLETIONS)
    spent = await accounting.admit(key, bill)  # 23 held: the whole budget
    await accounting.settle(spent, Usage(3, 8), Outcome.OK, "up")
    with pytest.raises(OverLimit, match="budget"):
        await accounting.admit(key, bill)  # the store says: spent
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # the store down
    try:
        with pytest.raises(OverLimit, match="budget"):
            await accounting.admit(key, bill)  # fail-open: still spent
    finally:
        other.execute("ROLLBACK")
        other.close()


async def test_a_request_over_a_whole_tpm_limit_is_a_400_not_a_429(tmp_path: Path) -> None:
    """Its prompt and max_tokens alone are over the key's tokens a minute: a 429 with a
    Retry-After sent the client back every minute, for ever."""
    from podserve.gateway.errors import InvalidRequest

    _, accounting, key = await _sqlite_accounting(tmp_path, "", tpm=50)
    fits = billable({"model": "m", "prompt": "abc", "max_tokens": 8}, Endpoint.COMPLETIONS)
    assert (await accounting.admit(key, fits)).reservation_id
    never = billable({"model": "m", "prompt": "x" * 40, "max_tokens": 20}, Endpoint.COMPLETIONS)
    with pytest.raises(InvalidRequest, match="can never be admitted"):
        await accounting.admit(key, never)
