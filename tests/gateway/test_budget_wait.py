"""Waiting for budget (`budgetWaitS`, gateway/budget_wait.py) and refusing what can never
fit: woken by a settlement on the waiter's scope, polling (backed off) for the others; a
client that leaves while it waits, or while a non-streamed upstream works, is dropped
(docs/gateway.md, "The budget algorithm").

The end-to-end cases run a gateway process in front of `SlowUpstream`, a stand-in hosted
API that holds a request until the test lets it go (a real pod cannot be held on demand)."""

from __future__ import annotations

import asyncio
import itertools
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from podserve.config.gateway_config import load_gateway_config
from podserve.gateway import accounting as accounting_module
from podserve.gateway.accounting import Accounting
from podserve.gateway.asgi import ClientGone
from podserve.gateway.budget import HoldPlan, Refusal, ScopeState, Usage, grant
from podserve.gateway.budget_wait import POLL_MAX_S, Waiters, poll_delays
from podserve.gateway.client_watch import ClientWatch
from podserve.gateway.errors import InvalidRequest
from podserve.gateway.keys import KeyRecord, key_id_of, new_key
from podserve.gateway.money import Rate
from podserve.gateway.store.base import Outcome
from podserve.gateway.store.sqlite import SqliteStore
from podserve.gateway.wire import Billable, Endpoint, billable
from tests.gateway.support import GatewayProcess, make_key, spend_by
from tests.support.server import wait_until

RATE = Rate(1000, 2000)  # 1 and 2 micro-dollars a token


# --- a stand-in upstream ---------------------------------------------------------------
class SlowUpstream:
    """An OpenAI-compatible API on loopback. Prompt "gate": the answer waits for `release`
    (and notes a client that closed the connection meanwhile in `cut`); a stream sends
    `chunks` tokens `every_s` apart; anything else is answered at once. Usage reported:
    1 prompt token, one completion token a chunk (1 when not streamed)."""

    def __init__(self, chunks: int = 0, every_s: float = 0.0) -> None:
        self.release = threading.Event()
        self.arrived: list[dict[str, Any]] = []
        self.cut = threading.Event()
        self.chunks, self.every_s = chunks, every_s
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                upstream.arrived.append(body)
                if body.get("stream"):
                    self._stream()
                    return
                if body.get("prompt") == "gate" and not upstream._held(self.connection):
                    upstream.cut.set()
                    return
                usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                answer = {"object": "text_completion", "model": body["model"], "usage": usage}
                answer["choices"] = [{"index": 0, "text": "x", "finish_reason": "stop"}]
                self._send(200, json.dumps(answer).encode(), "application/json")

            def _stream(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                events: list[dict[str, Any]] = [
                    {"choices": [{"index": 0, "text": "x", "finish_reason": None}]}
                    for _ in range(upstream.chunks)
                ]
                usage = {"prompt_tokens": 1, "completion_tokens": upstream.chunks}
                events.append({"choices": [], "usage": usage})
                for event in events:
                    self._chunk(f"data: {json.dumps(event)}\n\n".encode())
                    time.sleep(upstream.every_s)  # a stream that takes its time
                self._chunk(b"data: [DONE]\n\n")
                self._chunk(b"")

            def _chunk(self, data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            def _send(self, status: int, body: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _held(self, conn: socket.socket) -> bool:
        """Until `release` (True) or the client closes the connection (False)."""
        while not self.release.wait(0.02):  # polling a socket and an event: a period
            readable, _, _ = select.select([conn], [], [], 0)
            if readable and not conn.recv(1, socket.MSG_PEEK):
                return False
        return True

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def upstream() -> Iterator[SlowUpstream]:
    found = SlowUpstream()
    yield found
    found.close()


def slow_config(upstream: SlowUpstream, **defaults: Any) -> dict[str, Any]:
    return {
        "store": {"kind": "sqlite", "path": "gateway.db"},
        "pools": [],
        "fallbacks": [
            {
                "name": "slow",
                "baseUrl": upstream.url,
                "apiKeyEnv": "HOSTED_API_KEY",
                "models": ["slow"],
            }
        ],
        "prices": {"slow": {"inputPerMillionUsd": 1.0, "outputPerMillionUsd": 2.0}},
        "defaults": {"maxTokens": 16, **defaults},
        "storeTimeoutMs": 3000,
    }


def raw_request(gateway: GatewayProcess, key: str, body: dict[str, Any]) -> socket.socket:
    """A request sent on a socket the test closes when it likes (the client leaving)."""
    data = json.dumps(body).encode()
    conn = socket.create_connection(("127.0.0.1", gateway.http_port))
    conn.sendall(
        b"POST /v1/completions HTTP/1.1\r\nhost: gw\r\nauthorization: Bearer "
        + key.encode()
        + b"\r\ncontent-type: application/json\r\ncontent-length: "
        + str(len(data)).encode()
        + b"\r\n\r\n"
        + data
    )
    return conn


# --- policies, pure ------------------------------------------------------------------
def test_polls_back_off_to_a_second() -> None:
    delays = list(itertools.islice(poll_delays(), 8))
    assert delays[:3] == [0.025, 0.05, 0.1]
    assert delays[-1] == POLL_MAX_S
    assert delays == sorted(delays)


def test_a_request_that_could_never_fit_is_not_told_to_wait() -> None:
    """50 of 100 committed, 30 held: a request needing 45 fits once the hold settles (wait,
    Retry-After 1); one needing 60 never can, however the hold settles (3600)."""
    scope = ScopeState("key:k", 100, 50, 30)
    fits_later = grant(HoldPlan(5, 20, 20, RATE), [scope])  # 5 + 40
    never = grant(HoldPlan(10, 25, 25, RATE), [scope])  # 10 + 50
    assert isinstance(fits_later, Refusal)
    assert (fits_later.may_fit_later, fits_later.retry_after_s) == (True, 1)
    assert isinstance(never, Refusal)
    assert (never.may_fit_later, never.retry_after_s) == (False, 3600)


async def test_waiters_are_woken_by_their_own_scope() -> None:
    waiters = Waiters()
    waiting = asyncio.ensure_future(waiters.wait("key:a", 3600))
    await asyncio.sleep(0)
    waiters.wake(["key:b", "team:b"])
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiting.done()
    waiters.wake(["key:a"])
    assert await waiting is True
    assert len(waiters) == 0


async def test_a_waiter_whose_client_left_stops_waiting() -> None:
    waiters = Waiters()
    gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiting = asyncio.ensure_future(waiters.wait("key:a", 3600, gone))
    await asyncio.sleep(0)
    gone.set_result(None)
    assert await waiting is False
    assert len(waiters) == 0


# --- Accounting in process, over SQLite ------------------------------------------------
async def _accounting(tmp_path: Path, config: str = "") -> tuple[Accounting, KeyRecord]:
    store = SqliteStore(tmp_path / "gw.db")
    _, digest = new_key()
    key = KeyRecord(key_id_of(digest), digest, "t", "ns", (), 100, None, None, None, False, 0.0)
    await store.create_key(key)
    text = "prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}\n" + (
        config or "defaults: {budgetWaitS: 30}\n"
    )
    return Accounting(load_gateway_config(text), store), key


async def _waiting(waiters: Waiters) -> None:
    """Until a request waits for budget (its first reservation refused)."""
    for _ in range(100_000):
        if len(waiters):
            return
        await asyncio.sleep(0.001)
    raise AssertionError("no request ever waited")


def _bill(max_tokens: int) -> Billable:
    return billable({"model": "m", "prompt": "abc", "max_tokens": max_tokens}, Endpoint.COMPLETIONS)


async def test_a_hold_over_the_whole_budget_is_a_400_not_a_429(tmp_path: Path) -> None:
    """Its hold (7 + 2 * 1000) is over the key's whole budget of 100: no wait or period
    could admit it, so it is the client's error, named, as for a tpm limit."""
    accounting, key = await _accounting(tmp_path)
    with pytest.raises(InvalidRequest) as refused:
        await accounting.admit(key, _bill(1000))
    assert "2007 micro-dollars" in str(refused.value)
    assert "whole budget of 100" in str(refused.value)
    await accounting.store.close()


async def test_with_clamp_a_hold_over_the_budget_is_clamped(tmp_path: Path) -> None:
    clamped, key = await _accounting(tmp_path, "defaults: {budgetWaitS: 0, onBudgetShort: clamp}\n")
    admitted = await clamped.admit(key, _bill(1000))
    assert admitted.max_tokens == (100 - 7) // 2
    await clamped.store.close()


async def test_a_waiter_is_woken_by_a_settlement_on_its_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the poll out of the way (an hour), only a settlement on its own scope admits
    a waiter: another key's does not wake it."""
    monkeypatch.setattr(accounting_module, "poll_delays", lambda: itertools.repeat(3600.0))
    accounting, key = await _accounting(tmp_path)
    _, digest = new_key()
    other = KeyRecord(key_id_of(digest), digest, "u", "nu", (), 100, None, None, None, False, 0)
    await accounting.store.create_key(other)
    held = await accounting.admit(key, _bill(40))  # 87 of 100
    elsewhere = await accounting.admit(other, _bill(40))
    waiting = asyncio.ensure_future(accounting.admit(key, _bill(10)))  # needs 27
    await _waiting(accounting.waiters)
    await accounting.settle(elsewhere, Usage(3, 5), Outcome.OK, "pool")
    for _ in range(10):
        await asyncio.sleep(0)
    assert not waiting.done()
    await accounting.settle(held, Usage(3, 5), Outcome.OK, "pool")
    admitted = await waiting
    assert admitted.max_tokens == 10
    await accounting.settle(admitted, Usage(3, 1), Outcome.OK, "pool")
    await accounting.store.close()


async def test_another_replicas_settlement_is_found_by_the_poll(tmp_path: Path) -> None:
    """Two replicas on one store: the settlement on the other one wakes nothing here; the
    backed-off poll finds the room it made."""
    here, key = await _accounting(tmp_path)
    there = Accounting(here._config, SqliteStore(tmp_path / "gw.db"))
    held = await there.admit(key, _bill(40))
    waiting = asyncio.ensure_future(here.admit(key, _bill(10)))
    await _waiting(here.waiters)
    await there.settle(held, Usage(3, 5), Outcome.OK, "pool")
    admitted = await waiting
    await here.settle(admitted, Usage(3, 1), Outcome.OK, "pool")
    await here.store.close()
    await there.store.close()


async def test_a_client_leaving_while_it_waits_holds_and_pays_nothing(tmp_path: Path) -> None:
    accounting, key = await _accounting(tmp_path)
    left = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await left.wait()
        return {"type": "http.disconnect"}

    held = await accounting.admit(key, _bill(40))
    waiting = asyncio.ensure_future(accounting.admit(key, _bill(10), watch=ClientWatch(receive)))
    await _waiting(accounting.waiters)
    left.set()
    with pytest.raises(ClientGone):
        await waiting
    await accounting.settle(held, Usage(3, 5), Outcome.OK, "pool")
    store = accounting.store
    assert isinstance(store, SqliteStore)
    rows = store._db.execute("SELECT COUNT(*), SUM(cost_micro) FROM ledger").fetchone()
    assert rows == (1, 13)
    assert store._db.execute("SELECT SUM(reserved) FROM scopes").fetchone() == (0,)
    await store.close()


# --- end to end ----------------------------------------------------------------------
def test_a_client_leaving_while_waiting_for_budget_is_never_forwarded(
    upstream: SlowUpstream, tmp_path: Path
) -> None:
    config = slow_config(upstream, budgetWaitS=60)
    with GatewayProcess(config, tmp_path) as gateway:
        key, key_id = make_key(gateway.config_path, budget_micro=500)
        with httpx.Client(base_url=gateway.url, timeout=60) as client:
            first = threading.Thread(
                target=client.post,
                args=("/v1/completions",),
                kwargs={
                    "json": {"model": "slow", "prompt": "gate", "max_tokens": 200},
                    "headers": {"authorization": f"Bearer {key}"},
                },
            )
            first.start()  # holds 4 + 400 of 500 until released
            wait_until(lambda: len(upstream.arrived) == 1, what="the first request upstream")
            second = raw_request(gateway, key, {"model": "slow", "prompt": "b", "max_tokens": 150})
            gateway.wait_log(lambda r: r.get("msg") == "waiting for budget", 20)
            second.close()
            gateway.wait_log(lambda r: r.get("msg") == "client left while waiting for budget", 20)
            upstream.release.set()
            first.join()
            wait_until(lambda: key_id in spend_by(gateway.config_path, "key"), what="ledger")
            # A later request proves the budget was free for it: the leaver never held any.
            after = client.post(
                "/v1/completions",
                json={"model": "slow", "prompt": "c", "max_tokens": 150},
                headers={"authorization": f"Bearer {key}"},
            )
            assert after.status_code == 200, after.text
    assert [body["prompt"] for body in upstream.arrived] == ["gate", "c"]


def test_a_non_streamed_client_leaving_cancels_its_upstream_and_pays_its_hold(
    upstream: SlowUpstream, tmp_path: Path
) -> None:
    with GatewayProcess(slow_config(upstream), tmp_path) as gateway:
        key, key_id = make_key(gateway.config_path, budget_micro=10_000)
        conn = raw_request(gateway, key, {"model": "slow", "prompt": "gate", "max_tokens": 100})
        wait_until(lambda: len(upstream.arrived) == 1, what="the request upstream")
        conn.close()
        wait_until(upstream.cut.is_set, what="the upstream connection closed")
        wait_until(lambda: key_id in spend_by(gateway.config_path, "key"), what="ledger")
        row = spend_by(gateway.config_path, "key")[key_id]
    assert row.completion_tokens == 100  # the whole hold: its prompt bound and max_tokens
    assert row.cost_micro == row.prompt_tokens + 2 * 100


def test_a_hold_over_the_whole_budget_is_refused_as_the_clients_error(
    upstream: SlowUpstream, tmp_path: Path
) -> None:
    with GatewayProcess(slow_config(upstream), tmp_path) as gateway:
        key, _ = make_key(gateway.config_path, budget_micro=1_000_000)
        with httpx.Client(base_url=gateway.url, timeout=60) as client:
            refused = client.post(
                "/v1/completions",
                json={"model": "slow", "prompt": "hi", "max_tokens": 1_000_000},
                headers={"authorization": f"Bearer {key}"},
            )
    assert refused.status_code == 400, refused.text
    assert "retry-after" not in refused.headers
    assert "whole budget of 1000000 micro-dollars" in refused.json()["error"]["message"]
    assert upstream.arrived == []
