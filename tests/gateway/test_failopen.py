"""Fail-open shares on an injected clock: a replica's share of a budget during a store
outage is of what the store last said was left, until the budget's period refills it.
The end-to-end case (real Redis stopped under a gateway) is in test_shared.py."""

from __future__ import annotations

import uuid
from decimal import Decimal

from podserve.gateway.budget import Grant, HoldPlan, Refusal, RefusalReason
from podserve.gateway.failopen import LocalBudgets
from podserve.gateway.money import Rate
from podserve.gateway.store.base import Hold, Labels, ScopeSpec

RATE = Rate.per_million_usd(Decimal(1), Decimal(2))  # 10 prompt + 10 output = 30 micro


def _hold(limit_micro: int | None, refills_in_s: float | None = None) -> Hold:
    return Hold(
        reservation_id=uuid.uuid4().hex,
        plan=HoldPlan(10, 10, 10, RATE),
        scopes=(ScopeSpec("key:k", limit_micro, refills_in_s), ScopeSpec("team:t", None)),
        rpm=(),
        tpm=(),
        lease_until=0.0,
        labels=Labels("k", "t", "ns", "m"),
    )


def _granted(local: LocalBudgets, limit_micro: int, now: float) -> int:
    count = 0
    while isinstance(local.reserve(_hold(limit_micro), now), Grant):
        count += 1
    return count


def test_a_whole_share_without_a_reading() -> None:
    # Nothing known (say, a replica started during the outage): budget / replicas.
    assert _granted(LocalBudgets(replicas=2), 300, now=0.0) == 5  # 150 / 30


def test_the_share_is_of_what_the_store_said_was_left() -> None:
    local = LocalBudgets(replicas=2)
    # The store granted a hold of 30 when 300 - 120 committed = 180 was unspent.
    local.known(_hold(300), Grant(10, 30, 20, (180, None)), now_mono_s=0.0)
    assert _granted(local, 300, now=1.0) == 2  # (180 - 30) / 2 = 75 -> two holds of 30


def test_nothing_left_admits_nothing() -> None:
    local = LocalBudgets(replicas=1)
    # committed over the limit (outage charges recorded earlier): a negative reading
    local.known(_hold(300), Grant(10, 30, 20, (-5, None)), now_mono_s=0.0)
    refused = local.reserve(_hold(300), 1.0)
    assert isinstance(refused, Refusal)
    assert refused.reason is RefusalReason.BUDGET


def test_a_reading_lapses_when_the_period_refills() -> None:
    local = LocalBudgets(replicas=1)
    hold = _hold(300, refills_in_s=60.0)
    local.known(hold, Grant(10, 30, 20, (40, None)), now_mono_s=100.0)
    assert isinstance(local.reserve(_hold(300, 60.0), 150.0), Refusal)  # 10 left
    assert isinstance(local.reserve(_hold(300, 60.0), 161.0), Grant)  # a new period


def test_unlimited_scopes_take_no_reading() -> None:
    local = LocalBudgets(replicas=1)
    local.known(_hold(None), Grant(10, 30, 20, (None, None)), now_mono_s=0.0)
    assert isinstance(local.reserve(_hold(None), 1.0), Grant)
