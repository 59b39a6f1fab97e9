"""KEDA's cron scaler on the simulated clock (keda-docs content/docs/2.21/scalers/cron.md):
between a `start` and the next `end` occurrence the trigger is active and asks for
`desiredReplicas`. Simulated second 0 is a Monday 00:00 in the trigger's timezone (the
simulator has no calendar); five-field cron expressions with `*`, numbers, ranges, lists and
steps are understood."""

from __future__ import annotations

from podserve.core.errors import InvalidInput

MINUTES_PER_WEEK = 7 * 24 * 60
_RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


def _field(text: str, low: int, high: int) -> set[int]:
    out: set[int] = set()
    for part in text.split(","):
        base, _, step_text = part.partition("/")
        step = int(step_text) if step_text else 1
        if base == "*":
            start, stop = low, high
        elif "-" in base:
            a, b = base.split("-", 1)
            start, stop = int(a), int(b)
        else:
            start = stop = int(base)
        out.update(range(start, stop + 1, step))
    if 7 in out and high == 6:
        out.add(0)  # cron allows 7 for Sunday
    return out


def _matches(expression: str) -> list[bool]:
    """For each minute of the simulated week: does the expression fire?"""
    fields = expression.split()
    if len(fields) != 5:
        raise InvalidInput(f"cron expression {expression!r}: expected 5 fields")
    try:
        minute, hour, _, _, dow = (
            _field(f, lo, hi) for f, (lo, hi) in zip(fields, _RANGES, strict=True)
        )
    except ValueError as exc:
        raise InvalidInput(f"cron expression {expression!r}: {exc}") from exc
    fires = []
    for m in range(MINUTES_PER_WEEK):
        day, rest = divmod(m, 24 * 60)
        weekday = (day + 1) % 7  # day 0 is Monday; cron's 0 is Sunday
        fires.append(rest % 60 in minute and rest // 60 in hour and weekday in dow)
    return fires


def active_minutes(start: str, end: str) -> list[bool]:
    starts, ends = _matches(start), _matches(end)
    active = False
    table = [False] * MINUTES_PER_WEEK
    for _ in range(2):  # the second lap starts from the week's steady state
        for m in range(MINUTES_PER_WEEK):
            if starts[m]:
                active = True
            if ends[m]:
                active = False
            table[m] = active
    return table


def is_active(table: list[bool], now_s: float) -> bool:
    return table[int(now_s // 60) % MINUTES_PER_WEEK]
