"""What limits a key's requests: its budget scopes (the key's own, its team's, its
namespace's) with their budget periods, and its rate limits, from the key record and the
gateway config."""

from __future__ import annotations

import math
from dataclasses import dataclass

from podserve.config.gateway_config import BudgetPeriod, GatewayConfig, ScopeLimits
from podserve.gateway.keys import KeyRecord
from podserve.gateway.money import usd_to_micro
from podserve.gateway.periods import scope_name, span_at
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
            ScopeSpec(scope_name(s.name, p, wall_s), s.limit_micro)
            for s, p in zip(self.scopes, self.periods, strict=True)
        )

    def refill_in_s(self, scope: str, wall_s: float) -> int | None:
        """Seconds until a spent periodic budget starts again (None: lifetime)."""
        for s, p in zip(self.scopes, self.periods, strict=True):
            span = span_at(p, wall_s)
            if span is not None and scope == f"{s.name}@{span.label}":
                return max(1, math.ceil(span.end_s - wall_s))
        return None


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
