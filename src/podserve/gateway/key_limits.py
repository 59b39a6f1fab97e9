"""What limits a key's requests: its budget scopes (the key's own, its team's, its
namespace's) with their budget periods, and its rate limits, from the key record and the
gateway config."""

from __future__ import annotations

from dataclasses import dataclass

from podserve.config.gateway_config import BudgetPeriod, GatewayConfig, ScopeLimits
from podserve.gateway.keys import KeyRecord
from podserve.gateway.money import usd_to_micro
from podserve.gateway.periods import Span, span_at
from podserve.gateway.store.base import ScopeSpec


@dataclass(frozen=True, slots=True)
class KeyLimits:
    """A key's budget scopes (key, team, namespace) and its rate limits."""

    scopes: tuple[ScopeSpec, ...]  # key, team, namespace (limit None: unlimited)
    rates: tuple[tuple[str, int | None, int | None], ...]  # (scope, rpm, tpm), limited only
    periods: tuple[BudgetPeriod, ...]  # each scope's budget period (gateway/periods.py)

    def scopes_at(self, wall_s: float) -> tuple[ScopeSpec, ...]:
        """The scopes a request made now is charged to: a periodic budget's name carries
        its current period, so a new period starts from zero."""
        if all(p is BudgetPeriod.LIFETIME for p in self.periods):
            return self.scopes
        return tuple(
            _periodic(s, span_at(p, wall_s), wall_s)
            for s, p in zip(self.scopes, self.periods, strict=True)
        )


def _periodic(scope: ScopeSpec, span: Span | None, wall_s: float) -> ScopeSpec:
    """`scope` in the period `span` (itself for a lifetime budget)."""
    if span is None:
        return scope
    return ScopeSpec(f"{scope.name}@{span.label}", scope.limit_micro, span.end_s - wall_s)


def key_limits(key: KeyRecord, config: GatewayConfig) -> KeyLimits:
    team = config.teams.get(key.team)
    ns = config.namespaces.get(key.namespace)
    scopes = (
        ScopeSpec(f"key:{key.key_id}", key.budget_micro),
        ScopeSpec(f"team:{key.team}", _micro(team)),
        ScopeSpec(f"namespace:{key.namespace}", _micro(ns)),
    )
    lifetime = BudgetPeriod.LIFETIME
    periods = (
        key.budget_period,
        team.budget_period if team is not None else lifetime,
        ns.budget_period if ns is not None else lifetime,
    )
    rates = [(f"key:{key.key_id}", key.rpm, key.tpm)]
    if team is not None:
        rates.append((f"team:{key.team}", team.rpm, team.tpm))
    if ns is not None:
        rates.append((f"namespace:{key.namespace}", ns.rpm, ns.tpm))
    limited = tuple((s, r, t) for s, r, t in rates if r is not None or t is not None)
    return KeyLimits(scopes, limited, periods)


def _micro(limits: ScopeLimits | None) -> int | None:
    if limits is None or limits.budget_usd is None:
        return None
    return usd_to_micro(limits.budget_usd)
