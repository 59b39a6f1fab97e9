"""Admission while the store is down, for operators who opt in (`failOpen.enabled`).

Each replica then admits against budgets divided by the replica count, counted in memory
from the moment the store failed: N replicas together can spend at most the budget during
the outage, however it is split. Rate limits are not enforced meanwhile (they cannot be
exact without the shared counters). What was spent is kept as pending `Charge`s and
recorded in the store once it answers again (`Accounting.flush_offline`): committed to the
budgets and written to the ledger, once each.

A budget partly spent before the outage gets a share of what was left, not of the whole:
each grant from the store carries, per scope, the limit less what was committed
(`Grant.unspent_micro`), and this replica remembers the latest, less that grant's own
hold (`known`), until the budget's period would refill it. Without that, a key with 69 of
100 micro-dollars spent was admitted 46 more on one replica of two (issue 14 probe). A
budget the store refused as spent is remembered (`spent`) until it would refill, and
refused here too: an exhausted key got a fresh share of its budget at every outage.

Still open-ended, and documented (docs/gateway.md "Fail-open"): a reading is this
replica's own, so what other replicas spent after it is not in it, nor are this replica's
older holds still outstanding; a replica started during the outage knows nothing and
takes the whole share, budget ÷ replicas.
"""

from __future__ import annotations

from podserve.gateway.budget import Grant, Refusal, RefusalReason, ScopeState, grant
from podserve.gateway.store.base import Charge, Hold

_REMEMBERED = 100_000  # scopes per table below; a bound on memory


class LocalBudgets:
    def __init__(self, replicas: int) -> None:
        self._replicas = replicas
        self._committed: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._holds: dict[str, tuple[tuple[str, ...], int]] = {}
        self._spent_until: dict[str, float] = {}  # scope -> monotonic time it may refill
        # scope -> (limit - committed - the hold granted with the reading, when it may refill)
        self._unspent: dict[str, tuple[int, float | None]] = {}
        self.pending: list[Charge] = []

    def holds(self, reservation_id: str) -> bool:
        return reservation_id in self._holds

    def spent(self, scope: str, until_mono_s: float) -> None:
        """The store refused `scope` as spent; it may refill at `until_mono_s`."""
        if len(self._spent_until) >= _REMEMBERED:
            self._spent_until.clear()  # forgetting errs open, as before
        self._spent_until[scope] = until_mono_s

    def known(self, hold: Hold, granted: Grant, now_mono_s: float) -> None:
        """The store granted `hold`: remember what its budgets had left."""
        if len(self._unspent) >= _REMEMBERED:
            self._unspent.clear()
        for spec, unspent in zip(hold.scopes, granted.unspent_micro, strict=False):
            if unspent is None:
                continue
            refill = None if spec.refills_in_s is None else now_mono_s + spec.refills_in_s
            self._unspent[spec.name] = (unspent - granted.amount_micro, refill)

    def _share(self, name: str, limit_micro: int | None, now_mono_s: float) -> int | None:
        if limit_micro is None:
            return None
        share = limit_micro // self._replicas
        reading = self._unspent.get(name)
        if reading is not None and (reading[1] is None or now_mono_s < reading[1]):
            share = min(share, max(0, reading[0]) // self._replicas)
        return share

    def reserve(self, hold: Hold, now_mono_s: float) -> Grant | Refusal:
        for spec in hold.scopes:
            until = self._spent_until.get(spec.name)
            if until is not None and now_mono_s < until:
                wait = max(1, int(until - now_mono_s))
                return Refusal(RefusalReason.BUDGET, spec.name, wait)
        states = [
            ScopeState(
                s.name,
                self._share(s.name, s.limit_micro, now_mono_s),
                self._committed.get(s.name, 0),
                self._reserved.get(s.name, 0),
                s.refills_in_s,
            )
            for s in hold.scopes
        ]
        decision = grant(hold.plan, states)
        if isinstance(decision, Grant):
            names = tuple(s.name for s in hold.scopes)
            for name in names:
                self._reserved[name] = self._reserved.get(name, 0) + decision.amount_micro
            self._holds[hold.reservation_id] = (names, decision.amount_micro)
        return decision

    def scopes_of(self, reservation_id: str) -> tuple[str, ...]:
        return self._holds[reservation_id][0]

    def settle(self, reservation_id: str, cost_micro: int) -> None:
        names, amount = self._holds.pop(reservation_id)
        for name in names:
            self._reserved[name] -= amount
            self._committed[name] = self._committed.get(name, 0) + cost_micro

    def spent_micro(self, scope: str) -> int:
        return self._committed.get(scope, 0)
