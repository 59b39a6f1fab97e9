"""The load generator measured against a server that does nothing: its own ceiling
(the most requests per second it can drive) and floor (its p50 at concurrency 1).

A server benchmark whose throughput comes near the client's ceiling, or whose p50 comes
near the client's floor, is measuring the client; the self-test says where those lines are.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from podserve.bench.loop import Budget
from podserve.bench.sweep import BenchPlan, BenchResult, StepObserver, run_plan
from podserve.bench.trivial_server import ServerKind, TrivialServer
from podserve.bench.workloads import OipWorkload, Target, TensorInput
from podserve.core.tensors import Datatype

SELF_TEST_LEVELS = (1.0, 4.0, 16.0, 64.0)


@dataclass(frozen=True, slots=True)
class ClientLimits:
    server_kind: ServerKind
    ceiling_rps: float
    ceiling_concurrency: float
    floor_p50_ms: float | None

    def describe(self) -> str:
        floor = f"{self.floor_p50_ms:.3f} ms" if self.floor_p50_ms is not None else "n/a"
        return (
            f"client ceiling {self.ceiling_rps:,.0f} req/s (concurrency "
            f"{self.ceiling_concurrency:g}) and floor p50 {floor} at concurrency 1, "
            f"against the trivial {self.server_kind} server"
        )


def client_limits(result: BenchResult, kind: ServerKind) -> ClientLimits:
    summaries = result.summaries
    best = max(summaries, key=lambda s: s.throughput_rps)
    lowest = min(summaries, key=lambda s: s.level)
    floor = lowest.latency_ms.p50 if lowest.latency_ms and lowest.level == 1 else None
    return ClientLimits(kind, best.throughput_rps, best.level, floor)


async def run_self_test(
    kind: ServerKind = "raw",
    levels: Sequence[float] = SELF_TEST_LEVELS,
    budget: Budget | None = None,
    observer: StepObserver | None = None,
) -> tuple[BenchResult, ClientLimits]:
    """Start the trivial server in a child process and sweep `levels` against it."""
    # The payload of a small tabular model, so the client encodes what it does in earnest.
    workload = OipWorkload("trivial", (TensorInput("input-0", (1, 4), Datatype.FP32),))
    with TrivialServer(kind) as server:
        plan = BenchPlan(
            target=Target("127.0.0.1", server.port),
            workload=workload,
            levels=tuple(levels),
            budget=budget or Budget(duration_s=3.0, warmup_s=0.5),
        )
        result = await run_plan(plan, observer)
    # Autoscaling advice for a server that does nothing would only mislead.
    result = dataclasses.replace(result, advice=None)
    return result, client_limits(result, kind)
