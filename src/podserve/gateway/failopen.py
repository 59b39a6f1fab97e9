"""Admission while the store is down, for operators who opt in (`failOpen.enabled`).

Each replica then admits against budgets divided by the replica count, counted in memory
from the moment the store failed: N replicas together can spend at most the budget during
the outage, however it is split. Rate limits are not enforced meanwhile (they cannot be
exact without the shared counters). What was spent is kept as pending `Charge`s and
recorded in the store once it answers again (`Accounting.flush_offline`): committed to the
budgets and written to the ledger, once each.

What the store spent before the outage is not known here (its answers say grant or
refuse, not how much is left), so a budget partly spent gets a whole share again. A
budget the store refused as spent is remembered (`spent`) until it would refill, and
refused here too: an exhausted key got a fresh share of its budget at every outage.
"""

from __future__ import annotations

from podserve.gateway.budget import Grant, Refusal, RefusalReason, ScopeState, grant
from podserve.gateway.store.base import Charge, Hold

_SPENT_REMEMBERED = 100_000


class LocalBudgets:
    def __init__(self, replicas: int) -> None:
        self._replicas = replicas
        self._committed: dict[str, int] = {}
        self._reserved: dict[str, int] = {}
        self._holds: dict[str, tuple[tuple[str, ...], int]] = {}
        self._spent_until: dict[str, float] = {}  # scope -> monotonic time it may refill
        self.pending: list[Charge] = []

    def holds(self, reservation_id: str) -> bool:
        return reservation_id in self._holds

    def spent(self, scope: str, until_mono_s: float) -> None:
        """The store refused `scope` as spent; it may refill at `until_mono_s`."""
        if len(self._spent_until) >= _SPENT_REMEMBERED:
            self._spent_until.clear()  # a bound on memory; forgetting errs open, as before
        self._spent_until[scope] = until_mono_s

    def reserve(self, hold: Hold, now_mono_s: float) -> Grant | Refusal:
        for spec in hold.scopes:
            until = self._spent_until.get(spec.name)
            if until is not None and now_mono_s < until:
                wait = max(1, int(until - now_mono_s))
                return Refusal(RefusalReason.BUDGET, spec.name, wait)
        states = [
            ScopeState(
                s.name,
                None if s.limit_micro is None else s.limit_micro // self._replicas,
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
