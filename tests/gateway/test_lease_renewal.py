"""Holds are never left to their lease while their replica lives: a request in flight has
its lease renewed (gateway/leases.py), a failure before forwarding releases its hold at
once (gateway/exchange.py), and a settlement that finds its hold expired anyway is logged
with its real usage (docs/gateway.md, "Leases")."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from podserve.config.gateway_config import load_gateway_config
from podserve.gateway import app as app_module
from podserve.gateway.accounting import Accounting
from podserve.gateway.app import Gateway
from podserve.gateway.budget import Usage
from podserve.gateway.keys import KeyRecord, key_id_of, new_key
from podserve.gateway.leases import BATCH, OpenHolds
from podserve.gateway.store.base import Outcome
from podserve.gateway.store.sqlite import SqliteStore
from podserve.gateway.stores import open_store
from podserve.gateway.wire import Endpoint, billable
from tests.gateway.support import GatewayProcess, make_key, spend_by
from tests.gateway.test_budget_wait import SlowUpstream, slow_config
from tests.support.server import wait_until


class Renewals:
    """A store that records what it is asked to renew."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], float]] = []

    async def renew_leases(self, reservation_ids: list[str], lease_until: float) -> int:
        self.calls.append((reservation_ids, lease_until))
        return len(reservation_ids)


async def test_open_holds_are_renewed_every_third_of_a_lease_in_batches() -> None:
    holds = OpenHolds(lease_s=30.0)
    assert holds.due(0.0)
    for index in range(BATCH + 2):
        holds.add(f"r{index}")
    holds.discard("r0")  # settled: no longer renewed
    store = Renewals()
    assert await holds.renew(store, now_wall_s=1000.0, now_s=0.0) == BATCH + 1
    assert [len(ids) for ids, _ in store.calls] == [BATCH, 1]
    assert {until for _, until in store.calls} == {1030.0}
    assert "r0" not in store.calls[0][0]
    assert not holds.due(9.9)
    assert holds.due(10.0)


def test_a_stream_that_outlives_its_lease_is_charged_its_usage(tmp_path: Path) -> None:
    """leaseS 1 s and a stream of 3 s (15 tokens 0.2 s apart): the lease is renewed while
    it runs, so it settles at its 15 tokens. Before, the sweep charged its whole hold of
    500 tokens as `expired`, and the real settlement found nothing to settle."""
    upstream = SlowUpstream(chunks=15, every_s=0.2)
    try:
        config = slow_config(upstream, leaseS=1, maxTokens=500)
        with GatewayProcess(config, tmp_path) as gateway:
            key, key_id = make_key(gateway.config_path, budget_micro=100_000)
            with httpx.Client(base_url=gateway.url, timeout=60) as client:
                body = {"model": "slow", "prompt": "hi", "stream": True}
                headers = {"authorization": f"Bearer {key}"}
                with client.stream("POST", "/v1/completions", json=body, headers=headers) as r:
                    assert r.status_code == 200
                    assert sum(1 for line in r.iter_lines() if line.startswith("data: {")) == 15
            wait_until(lambda: key_id in spend_by(gateway.config_path, "key"), what="ledger")
            row = spend_by(gateway.config_path, "key")[key_id]
            assert not [r for r in gateway.logs if "lease expired" in str(r.get("msg"))]
    finally:
        upstream.close()
    assert (row.prompt_tokens, row.completion_tokens, row.requests) == (1, 15, 1)
    assert row.cost_micro == 1 + 2 * 15


async def test_a_failure_before_forwarding_releases_the_hold_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Re-encoding the body fails after the reservation (a bug, or a body the encoder
    cannot take): the client gets a 500 and the hold is settled at zero at once, so the
    next request fits. Before, the hold blocked the budget until its lease ran out
    (600 s), then was charged in full."""
    upstream = SlowUpstream()
    config_dict = slow_config(upstream, leaseS=600, budgetWaitS=0)
    config_dict["store"] = {"kind": "sqlite", "path": str(tmp_path / "gw.db")}
    config_path = tmp_path / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(config_dict))
    # The CLI's store runs its own event loop: off this one.
    key, key_id = await asyncio.to_thread(make_key, config_path, budget_micro=300)
    config = load_gateway_config(config_path.read_text())
    gateway = Gateway(config, open_store(config, {}), {"slow": "sk-test"})
    await gateway.startup()
    broken = [True]
    real = app_module.forwarded_body  # type: ignore[attr-defined]

    def forwarded_body(*args: Any) -> bytes:
        if broken[0]:
            raise RuntimeError("cannot re-encode this body")
        return real(*args)

    monkeypatch.setattr(app_module, "forwarded_body", forwarded_body)
    transport = httpx.ASGITransport(app=gateway.asgi())  # type: ignore[arg-type]
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            body = {"model": "slow", "prompt": "hi", "max_tokens": 100}  # holds ~206 of 300
            headers = {"authorization": f"Bearer {key}"}
            failed = await client.post("/v1/completions", json=body, headers=headers)
            assert failed.status_code == 500
            broken[0] = False
            served = await client.post("/v1/completions", json=body, headers=headers)
            assert served.status_code == 200, served.text
    finally:
        await gateway.shutdown()
        upstream.close()
    rows = (await asyncio.to_thread(spend_by, config_path, "key"))[key_id]
    assert rows.requests == 2
    assert rows.cost_micro == 1 + 2  # the served one's usage; the failed one nothing
    assert len(upstream.arrived) == 1  # the failed one never went upstream


async def test_a_settlement_after_its_lease_expired_is_logged_with_its_usage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = SqliteStore(tmp_path / "gw.db")
    _, digest = new_key()
    key = KeyRecord(key_id_of(digest), digest, "t", "ns", (), 1000, None, None, None, False, 0)
    await store.create_key(key)
    config = load_gateway_config("prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}}")
    accounting = Accounting(config, store)
    bill = billable({"model": "m", "prompt": "abc", "max_tokens": 40}, Endpoint.COMPLETIONS)
    admission = await accounting.admit(key, bill)
    assert admission.reservation_id in accounting.open
    assert await store.expire_leases(10**10) == 1  # as if its renewals had all failed
    with caplog.at_level(logging.WARNING, logger="podserve.gateway"):
        await accounting.settle(admission, Usage(3, 5), Outcome.OK, "pool")
    [record] = [r for r in caplog.records if "lease expired" in r.getMessage()]
    assert (record.cost_micro, record.completion_tokens) == (13, 5)  # type: ignore[attr-defined]
    assert admission.reservation_id not in accounting.open
    await store.close()
