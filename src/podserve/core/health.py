"""The answer to a probe, shared by the lifecycle and the edges."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class HealthReport:
    """An answer to a probe: ok, and when not, every reason that failed."""

    ok: bool
    state: str
    reasons: tuple[str, ...] = ()
    details: dict[str, object] = field(default_factory=dict)
