"""A whole benchmark: a plan of load levels, run step by step, with the ceiling, knee and
autoscaling advice that follow. The CLI and `benchmarks/run.py` both call `run_plan`."""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from podserve.bench.ceiling import (
    AutoscaleMetric,
    AutoscalingAdvice,
    CeilingSearch,
    ceiling_level,
    knee_level,
    recommend_autoscaling,
)
from podserve.bench.client import uses_uvloop
from podserve.bench.loop import Arrival, Budget, ClosedLoop, LiveStep, LoadLevel, OpenLoop, run_step
from podserve.bench.stats import Slo, StepSummary, per_request_tpot_s, summarize
from podserve.bench.workloads import Target, Workload
from podserve.core.types import Array

Mode = Literal["concurrency", "rate"]


@dataclass(frozen=True, slots=True)
class BenchPlan:
    target: Target
    workload: Workload
    mode: Mode = "concurrency"
    levels: tuple[float, ...] | None = (1.0,)  # None: search automatically
    budget: Budget = field(default_factory=Budget)
    slo: Slo = field(default_factory=Slo)
    attainment: float = 0.99
    arrival: Arrival = "poisson"
    burstiness: float = 0.5
    max_connections: int = 1024
    max_level: float = 1024.0
    headers: Mapping[str, str] = field(default_factory=dict)
    seed: int = 0
    headroom: float = 0.8
    autoscale_metric: AutoscaleMetric = "inflight"
    server_slots: int | None = None

    def load_level(self, level: float) -> LoadLevel:
        if self.mode == "concurrency":
            return ClosedLoop(int(level))
        return OpenLoop(level, self.arrival, self.burstiness, self.max_connections, self.seed)

    def describe(self) -> dict[str, object]:
        budget = self.budget
        return {
            "target": f"http://{self.target.authority}",
            "workload": self.workload.describe(),
            "mode": self.mode,
            "levels": list(self.levels) if self.levels is not None else "auto",
            "arrival": self.arrival if self.mode == "rate" else None,
            "duration_s": budget.duration_s,
            "requests_per_step": budget.requests,
            "warmup_s": budget.warmup_s,
            "timeout_s": budget.timeout_s,
            "slo": self.slo.describe(),
            "slo_attainment_target": self.attainment,
        }


@dataclass(frozen=True, slots=True)
class StepResult:
    summary: StepSummary
    # Raw samples (seconds), kept for the distribution plots; not written to JSON.
    latency_s: Array
    ttft_s: Array
    tpot_s: Array


@dataclass(frozen=True, slots=True)
class BenchResult:
    started_at: str
    plan: dict[str, object]
    client: dict[str, object]
    steps: list[StepResult]
    ceiling: float | None
    knee: float | None
    advice: AutoscalingAdvice | None

    @property
    def summaries(self) -> list[StepSummary]:
        return [s.summary for s in self.steps]


class StepObserver(Protocol):
    def step_started(self, live: LiveStep) -> None: ...

    def step_finished(self, summary: StepSummary) -> None: ...


async def run_plan(plan: BenchPlan, observer: StepObserver | None = None) -> BenchResult:
    requests = plan.workload.prepare(plan.target, plan.headers)
    search = CeilingSearch(
        plan.levels,
        start=1.0,
        max_level=plan.max_level,
        integer=plan.mode == "concurrency",
    )
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    steps: list[StepResult] = []
    while (level := search.next_level()) is not None:
        load = plan.load_level(level)
        live = LiveStep(load, plan.budget)
        if observer is not None:
            observer.step_started(live)
        columns = await run_step(plan.target, requests, load, plan.budget, live)
        summary = summarize(columns, plan.mode, level, plan.slo, plan.attainment)
        search.observe(level, summary.slo_met, summary.throughput_rps)
        ok = (columns.status >= 200) & (columns.status < 300)
        steps.append(
            StepResult(
                summary,
                latency_s=columns.latency_s[ok],
                ttft_s=columns.ttft_s[ok],
                tpot_s=per_request_tpot_s(columns)[ok],
            )
        )
        if observer is not None:
            observer.step_finished(summary)
    steps.sort(key=lambda s: s.summary.level)
    summaries = [s.summary for s in steps]
    advice = None
    if plan.autoscale_metric == "inflight" or plan.server_slots is not None:
        advice = recommend_autoscaling(
            summaries,
            headroom=plan.headroom,
            metric=plan.autoscale_metric,
            server_slots=plan.server_slots,
        )
    return BenchResult(
        started_at=started_at,
        plan=plan.describe(),
        client={
            "uvloop": uses_uvloop(),
            "python": platform.python_version(),
            "machine": platform.machine(),
        },
        steps=steps,
        ceiling=ceiling_level(summaries) if not plan.slo.is_empty else None,
        knee=knee_level(summaries),
        advice=advice,
    )
