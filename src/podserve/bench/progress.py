"""Live progress on a terminal (rich), or one line per finished step elsewhere.

rich redraws from its own thread four times a second, reading the running step's
counters; the event loop never waits on the display.
"""

from __future__ import annotations

import statistics
import sys
import time
from types import TracebackType
from typing import TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from podserve.bench.loop import LiveStep
from podserve.bench.stats import StepSummary


def step_line(summary: StepSummary) -> str:
    lat = summary.latency_ms
    latency = f"p50 {lat.p50:.2f} ms, p99 {lat.p99:.2f} ms" if lat else "no successful request"
    errors = sum(summary.errors.values())
    slo = "" if summary.slo_met is None else f", SLO {'met' if summary.slo_met else 'MISSED'}"
    return (
        f"{summary.mode} {summary.level:g}: {summary.throughput_rps:,.1f} req/s, {latency}, "
        f"{errors} errors{slo}"
    )


class LinePrinter:
    """For logs and pipes: a line when each step ends."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream

    def step_started(self, live: LiveStep) -> None:
        return None

    def step_finished(self, summary: StepSummary) -> None:
        print(step_line(summary), file=self._stream or sys.stderr, flush=True)


class RichProgress:
    """A table of finished steps and a live line for the running one."""

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True)
        self._finished: list[StepSummary] = []
        self._live_step: LiveStep | None = None
        self._step_started_s = 0.0
        self._seen = 0
        self._window_start_s = 0.0
        self._rate = 0.0
        self._recent_p50_ms: float | None = None
        self._live = Live(
            get_renderable=self._render,
            console=self._console,
            refresh_per_second=4,
            transient=False,
        )

    def __enter__(self) -> RichProgress:
        self._live.__enter__()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._live_step = None
        self._live.__exit__(exc_type, exc, tb)

    def step_started(self, live: LiveStep) -> None:
        self._live_step = live
        self._step_started_s = self._window_start_s = time.perf_counter()
        self._seen = 0
        self._rate = 0.0
        self._recent_p50_ms = None

    def step_finished(self, summary: StepSummary) -> None:
        self._finished.append(summary)
        self._live_step = None

    def _render(self) -> Group:
        table = Table(title="podserve bench", expand=False)
        for column in ("level", "req/s", "p50 ms", "p99 ms", "errors", "SLO"):
            table.add_column(column, justify="right")
        for s in self._finished:
            lat = s.latency_ms
            table.add_row(
                f"{s.level:g}",
                f"{s.throughput_rps:,.1f}",
                f"{lat.p50:.2f}" if lat else "-",
                f"{lat.p99:.2f}" if lat else "-",
                str(sum(s.errors.values())),
                "-" if s.slo_met is None else ("met" if s.slo_met else "missed"),
            )
        return Group(table, Text(self._status_line()))

    def _status_line(self) -> str:
        live = self._live_step
        if live is None:
            return ""
        now = time.perf_counter()
        recorded = live.recorder
        count = len(recorded)
        # Refresh the rate and recent p50 at most twice a second, from new rows only.
        if now - self._window_start_s >= 0.5:
            fresh = recorded.latencies_since(self._seen)
            self._rate = len(fresh) / (now - self._window_start_s)
            if fresh:
                self._recent_p50_ms = statistics.median(fresh) * 1000
            self._seen, self._window_start_s = count, now
        p50 = f"{self._recent_p50_ms:.2f} ms" if self._recent_p50_ms is not None else "-"
        budget = live.budget
        goal = (
            f"{budget.requests} requests"
            if budget.requests is not None
            else f"{budget.duration_s:g} s"
        )
        return (
            f"{live.level.describe()}: {live.phase}, {now - self._step_started_s:.1f} s, "
            f"{count} measured of {goal} (+{budget.warmup_s:g} s warm-up), "
            f"{self._rate:,.0f} req/s, recent p50 {p50}, in flight {live.in_flight}"
        )
