"""Progress and throughput of a batch job: a rich bar on a terminal, JSON log lines on
stderr for a pod's log, or nothing but the final summary. As for `podserve fetch`
(storage/progress.py), `auto` draws the bar only on a TTY and never when JSON logs were
asked for (`PODSERVE_LOG_FORMAT=json`).

The runner reports after every committed chunk; each reporter decides how often to show
it (JSON lines are throttled so a long job does not flood the log).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import IO, Protocol

from rich.console import Console
from rich.progress import BarColumn, TaskID, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichBar

from podserve.core.clock import MONOTONIC, Clock
from podserve.storage.progress import json_log_line, wants_bar


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Counters so far. `rows`, `lines`, `errors` and `seconds` are this run's; the totals
    include what earlier runs of the same job committed."""

    rows: int
    lines: int
    errors: int
    seconds: float
    total_rows: int
    total_errors: int
    input_done_bytes: int
    input_size_bytes: int

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0


class Reporter(Protocol):
    def started(self, snapshot: Snapshot) -> None: ...

    def advanced(self, snapshot: Snapshot) -> None: ...

    def finished(self, snapshot: Snapshot) -> None:
        """The job is done; write the summary line."""
        ...


def summary_text(s: Snapshot) -> str:
    resumed = s.total_rows - s.rows
    earlier = f" (+{resumed:,} rows from earlier runs)" if resumed else ""
    return (
        f"podserve batch: {s.rows:,} rows in {s.lines:,} lines, {s.errors:,} errors, "
        f"{s.seconds:.2f} s, {s.rows_per_s:,.1f} rows/s{earlier}"
    )


def _record(event: str, s: Snapshot) -> dict[str, object]:
    return {"event": event, **asdict(s), "rows_per_s": round(s.rows_per_s, 1)}


class SummaryOnly:
    """No progress; the summary as one plain line."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream

    def started(self, snapshot: Snapshot) -> None:
        pass

    def advanced(self, snapshot: Snapshot) -> None:
        pass

    def finished(self, snapshot: Snapshot) -> None:
        self._stream.write(summary_text(snapshot) + "\n")
        self._stream.flush()


class JsonLinesReporter:
    """One JSON object a line: `started`, `progress` at most every `interval_s`, `summary`."""

    def __init__(
        self,
        stream: IO[str],
        *,
        interval_s: float = 5.0,
        clock: Clock = MONOTONIC,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._stream = stream
        self._interval_s = interval_s
        self._clock = clock
        self._wall = wall
        self._last_emit_s = clock.now_s()

    def _emit(self, event: str, snapshot: Snapshot) -> None:
        msg = summary_text(snapshot) if event == "summary" else f"batch {event}"
        line = json_log_line("podserve.batch", msg, _record(event, snapshot), wall_s=self._wall())
        self._stream.write(line)
        self._stream.flush()

    def started(self, snapshot: Snapshot) -> None:
        self._last_emit_s = self._clock.now_s()
        self._emit("started", snapshot)

    def advanced(self, snapshot: Snapshot) -> None:
        now_s = self._clock.now_s()
        if now_s - self._last_emit_s >= self._interval_s:
            self._last_emit_s = now_s
            self._emit("progress", snapshot)

    def finished(self, snapshot: Snapshot) -> None:
        self._emit("summary", snapshot)


class RichReporter:
    """A bar over the input's bytes (known without counting lines first), with rows,
    rows/s and errors beside it."""

    def __init__(self, console: Console) -> None:
        self._console = console
        self._bar = RichBar(
            TextColumn("scoring"),
            BarColumn(),
            TextColumn("{task.percentage:>5.1f}%"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
            console=console,
        )
        self._task: TaskID | None = None

    def started(self, snapshot: Snapshot) -> None:
        self._bar.start()
        self._task = self._bar.add_task(
            "scoring",
            total=max(snapshot.input_size_bytes, 1),
            completed=snapshot.input_done_bytes,
            status=self._status(snapshot),
        )

    def advanced(self, snapshot: Snapshot) -> None:
        if self._task is not None:
            self._bar.update(
                self._task, completed=snapshot.input_done_bytes, status=self._status(snapshot)
            )

    def finished(self, snapshot: Snapshot) -> None:
        self.advanced(snapshot)
        self._bar.stop()
        self._console.print(summary_text(snapshot), markup=False, highlight=False)

    @staticmethod
    def _status(s: Snapshot) -> str:
        return f"{s.total_rows:,} rows  {s.rows_per_s:,.0f} rows/s  {s.total_errors:,} errors"


def reporter_for(
    mode: str, stream: IO[str] | None = None, *, log_format: str | None = None
) -> Reporter:
    """`auto` picks the bar on a terminal (unless `log_format` is `json`), JSON log lines
    otherwise."""
    out = stream if stream is not None else sys.stderr
    if mode == "auto":
        mode = "rich" if wants_bar(out, log_format) else "json"
    if mode == "rich":
        return RichReporter(Console(file=out))
    if mode == "json":
        return JsonLinesReporter(out)
    if mode == "none":
        return SummaryOnly(out)
    raise ValueError(f"unknown progress mode {mode!r}; expected auto, rich, json or none")
