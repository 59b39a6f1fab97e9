"""The query that rebuilds Redis's committed counters from the PostgreSQL ledger (an empty
Redis: restarted or flushed), named as the live counters name their scopes."""

from __future__ import annotations

from typing import Any

from podserve.gateway.periods import PERIODIC, span_at


def committed_query(now_wall_s: float) -> tuple[str, tuple[Any, ...]]:
    """Every scope's committed spend from the ledger, as the live counters name it: the
    lifetime scope (`key:<id>`) and, for each budget period, the current one
    (`key:<id>@2026-12`, from the rows settled since it began; gateway/periods.py). Which
    keys, teams and namespaces have periodic budgets is not the store's to know, so every
    scope gets all four; the unused ones are never read. A request reserved just before a
    boundary and settled after it counts in the new period here, where the live counters
    had it in the old one: only after a rebuild, and never in the lifetime total."""
    parts: list[str] = []
    params: list[Any] = []
    for column, prefix in (("key_id", "key:"), ("team", "team:"), ("namespace", "namespace:")):
        parts.append(
            f"SELECT %s || {column}, SUM(cost_micro) FROM gateway_ledger GROUP BY {column}"
        )
        params.append(prefix)
        for period in PERIODIC:
            span = span_at(period, now_wall_s)
            if span is None:  # not a periodic budget
                continue
            parts.append(
                f"SELECT %s || {column} || %s, SUM(cost_micro) FROM gateway_ledger "
                f"WHERE at >= %s GROUP BY {column}"
            )
            params += [prefix, f"@{span.label}", span.start_s]
    return " UNION ALL ".join(parts), tuple(params)
