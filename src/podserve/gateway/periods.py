"""Budget periods: a budget that starts again every UTC day, ISO week or calendar month.

A periodic budget is a scope whose name carries its period (`team:search@2026-12`): the
counters of a new period start at zero simply because nobody has written that name yet.
Nothing resets anything, so no job can run late or twice, and every replica agrees the
moment its clock crosses the boundary (each computes the same name from UTC wall time;
clocks a little apart disagree only for that little while). A reservation keeps the
scope names it was made under, so its settlement lands in the period that held it, even
when the request ends after the boundary.

LiteLLM's `budget_duration` resets a key's spend from a scheduled job
(litellm/proxy/common_utils/reset_budget_job.py); a name per period needs no job.
Calendar periods, not durations from creation: a team's "monthly" budget is the invoice
month, the same for every key.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from podserve.config.gateway_config import BudgetPeriod

_PERIODIC = (BudgetPeriod.DAILY, BudgetPeriod.WEEKLY, BudgetPeriod.MONTHLY)


@dataclass(frozen=True, slots=True)
class Span:
    """One period: its label (the scope-name suffix) and its UTC bounds in wall seconds."""

    label: str
    start_s: float
    end_s: float


def span_at(period: BudgetPeriod, wall_s: float) -> Span | None:
    """The period holding `wall_s` (None for a lifetime budget)."""
    if period is BudgetPeriod.LIFETIME:
        return None
    now = dt.datetime.fromtimestamp(wall_s, dt.UTC)
    day = dt.datetime(now.year, now.month, now.day, tzinfo=dt.UTC)
    if period is BudgetPeriod.DAILY:
        start, end = day, day + dt.timedelta(days=1)
        label = start.strftime("%Y-%m-%d")
    elif period is BudgetPeriod.WEEKLY:
        start = day - dt.timedelta(days=day.weekday())
        end = start + dt.timedelta(weeks=1)
        year, week, _ = start.isocalendar()
        label = f"{year}-W{week:02d}"
    else:
        start = day.replace(day=1)
        end = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else (start.replace(month=start.month + 1))
        )
        label = start.strftime("%Y-%m")
    return Span(label, start.timestamp(), end.timestamp())


def periodic_spans(wall_s: float) -> list[Span]:
    """The current daily, weekly and monthly periods."""
    return [span for p in _PERIODIC if (span := span_at(p, wall_s)) is not None]
