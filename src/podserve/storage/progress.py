"""Fetch progress: a rich bar on a terminal, JSON log lines for logs, or nothing.

Fetchers and the orchestration report through the small `Progress` protocol; they never
know which of these is on the other end. The bar is drawn only for a person: on a TTY,
and not when JSON logs were asked for (`PODSERVE_LOG_FORMAT=json`), because a container
started with `tty: true` has a TTY too and its log collector would get a bar's escape
codes between JSON lines. The JSON lines have the server's log shape (`ts`, `level`,
`logger`, `msg`), so one pipeline parses both.
"""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Callable
from typing import IO, Protocol

import orjson
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.progress import Progress as RichBar

from podserve.core.clock import MONOTONIC, Clock


class Phase(enum.StrEnum):
    """Steps of a fetch worth telling an operator about, in the order they happen."""

    CACHE_HIT = "cache_hit"
    WAITING_FOR_LOCK = "waiting_for_lock"
    DOWNLOADING = "downloading"
    UNPACKING = "unpacking"
    VERIFYING = "verifying"
    PUBLISHED = "published"
    EVICTED = "evicted"


class Progress(Protocol):
    def phase(self, phase: Phase, detail: str) -> None:
        """A step began (or, for CACHE_HIT/PUBLISHED/EVICTED, happened)."""
        ...

    def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
        """A file transfer began; `resumed_bytes` were already on disk from an earlier try."""
        ...

    def file_advanced(self, name: str, n_bytes: int) -> None: ...

    def file_finished(self, name: str) -> None: ...

    def close(self) -> None: ...


class NullProgress:
    __slots__ = ()

    def phase(self, phase: Phase, detail: str) -> None:
        pass

    def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
        pass

    def file_advanced(self, name: str, n_bytes: int) -> None:
        pass

    def file_finished(self, name: str) -> None:
        pass

    def close(self) -> None:
        pass


def json_log_line(
    logger: str,
    msg: str,
    fields: dict[str, object],
    *,
    level: str = "info",
    wall_s: float | None = None,
) -> str:
    """One line in the shape of podserve's JSON logs (obs/logging.py's JsonFormatter):
    `ts`, `level`, `logger`, `msg`, then the fields."""
    now_s = time.time() if wall_s is None else wall_s
    ts = (
        time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now_s)) + f".{int(now_s * 1000) % 1000:03d}Z"
    )
    record = {"ts": ts, "level": level, "logger": logger, "msg": msg, **fields}
    return orjson.dumps(record, default=str).decode() + "\n"


def wants_bar(stream: IO[str], log_format: str | None) -> bool:
    """`auto` mode: a bar only on a terminal, and never when JSON logs were asked for."""
    return log_format != "json" and stream.isatty()


class JsonLinesProgress:
    """One JSON log line per event. Byte counts are throttled to one line per file per
    `interval_s`, so a multi-GB download does not flood the pod's log."""

    def __init__(
        self,
        stream: IO[str],
        *,
        interval_s: float = 1.0,
        clock: Clock = MONOTONIC,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._stream = stream
        self._interval_s = interval_s
        self._clock = clock
        self._wall = wall
        self._done: dict[str, int] = {}
        self._total: dict[str, int | None] = {}
        self._last_emit_s: dict[str, float] = {}

    def _emit(self, record: dict[str, object]) -> None:
        msg = str(record["event"]).replace("_", " ")
        self._stream.write(json_log_line("podserve.fetch", msg, record, wall_s=self._wall()))
        self._stream.flush()

    def phase(self, phase: Phase, detail: str) -> None:
        self._emit({"event": phase.value, "detail": detail})

    def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
        self._done[name] = resumed_bytes
        self._total[name] = total_bytes
        self._last_emit_s[name] = self._clock.now_s()
        self._emit(
            {
                "event": "file_started",
                "file": name,
                "total_bytes": total_bytes,
                "resumed_bytes": resumed_bytes,
            }
        )

    def file_advanced(self, name: str, n_bytes: int) -> None:
        self._done[name] = self._done.get(name, 0) + n_bytes
        now_s = self._clock.now_s()
        if now_s - self._last_emit_s.get(name, now_s) >= self._interval_s:
            self._last_emit_s[name] = now_s
            self._emit(
                {
                    "event": "progress",
                    "file": name,
                    "done_bytes": self._done[name],
                    "total_bytes": self._total.get(name),
                }
            )

    def file_finished(self, name: str) -> None:
        self._emit({"event": "file_finished", "file": name, "done_bytes": self._done.pop(name, 0)})
        self._total.pop(name, None)
        self._last_emit_s.pop(name, None)

    def close(self) -> None:
        pass


class RichProgress:
    """A transfer bar per file on a terminal (stderr, so stdout keeps only the path)."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._bar = RichBar(
            TextColumn("{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TimeRemainingColumn(),
            console=self._console,
        )
        self._tasks: dict[str, TaskID] = {}
        self._bar.start()

    def phase(self, phase: Phase, detail: str) -> None:
        self._bar.console.print(
            f"[bold]{phase.value.replace('_', ' ')}[/bold] {detail}", markup=True, highlight=False
        )

    def file_started(self, name: str, total_bytes: int | None, resumed_bytes: int) -> None:
        self._tasks[name] = self._bar.add_task(name, total=total_bytes, completed=resumed_bytes)

    def file_advanced(self, name: str, n_bytes: int) -> None:
        task = self._tasks.get(name)
        if task is not None:
            self._bar.advance(task, n_bytes)

    def file_finished(self, name: str) -> None:
        task = self._tasks.pop(name, None)
        if task is not None:
            total = self._bar.tasks[task].total
            if total is None:
                total = self._bar.tasks[task].completed
            self._bar.update(task, total=total, completed=total)

    def close(self) -> None:
        self._bar.stop()


def progress_for(
    mode: str, stream: IO[str] | None = None, *, log_format: str | None = None
) -> Progress:
    """`auto` picks the bar on a terminal (unless `log_format` is `json`), JSON log lines
    otherwise."""
    out = stream if stream is not None else sys.stderr
    if mode == "auto":
        mode = "rich" if wants_bar(out, log_format) else "json"
    if mode == "rich":
        return RichProgress(Console(file=out))
    if mode == "json":
        return JsonLinesProgress(out)
    if mode == "none":
        return NullProgress()
    raise ValueError(f"unknown progress mode {mode!r}; expected auto, rich, json or none")
