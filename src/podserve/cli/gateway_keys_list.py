"""`podserve gateway keys list`: the JSON rows (a stable contract) and the text table.

The table shows what decides whether a request with the key is let through: its status
(`revoked`, `expired` or `active`, as the gateway judges it: KeyRecord.usable), models,
limits and expiry. Before, an expired key was listed `active` and none of those showed.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from podserve.gateway.keys import KeyRecord

_HEADER = (
    f"{'KEY ID':<14}{'TEAM':<16}{'NAMESPACE':<16}{'BUDGET USD':>12}  {'PERIOD':<10}"
    f"{'RPM':>11}{'TPM':>11}  {'EXPIRES (UTC)':<17}  {'STATUS':<8}MODELS"
)


def key_rows(records: Sequence[KeyRecord]) -> list[dict[str, Any]]:
    """`--format json`'s rows (never the key or its digest)."""
    return [
        {
            "key_id": r.key_id,
            "team": r.team,
            "namespace": r.namespace,
            "models": list(r.models),
            "budget_usd": None if r.budget_micro is None else r.budget_micro / 1e6,
            "budget_period": r.budget_period.value,
            "rpm": r.rpm,
            "tpm": r.tpm,
            "expires_at": r.expires_at,
            "revoked": r.revoked,
        }
        for r in records
    ]


def status(record: KeyRecord, wall_s: float) -> str:
    if record.revoked:
        return "revoked"
    return "active" if record.usable(wall_s) else "expired"


def key_table(records: Sequence[KeyRecord], wall_s: float) -> list[str]:
    """The text table's lines, header first; `-` where a key has no limit or expiry, `*`
    for a key allowed every model."""
    lines = [_HEADER]
    for r in records:
        budget = "-" if r.budget_micro is None else f"{r.budget_micro / 1e6:.6f}"
        expires = (
            "-"
            if r.expires_at is None
            else time.strftime("%Y-%m-%d %H:%M", time.gmtime(r.expires_at))
        )
        lines.append(
            f"{r.key_id:<14}{r.team:<16}{r.namespace:<16}{budget:>12}  "
            f"{r.budget_period.value:<10}{_limit(r.rpm):>11}{_limit(r.tpm):>11}  "
            f"{expires:<17}  {status(r, wall_s):<8}{','.join(r.models) or '*'}"
        )
    return lines


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)
