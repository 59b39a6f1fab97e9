"""What Prometheus would answer about the simulated pods, and each metric's HPA proposal.

Per pod: a Ready pod reports its share of the workload's requests; a pod whose server is
running but still loading the model reports 0 (podserve's /metrics answers from the first
second, DESIGN.md §2), which the HPA counts for Pods metrics (they ignore readiness,
replica_calculator.go groupPods); a Pending pod has no sample and is "unready". Totals are
what a `sum(...)` query returns, terminating pods included while they still answer. A
`rate(...[w])` query sees the offered requests at the gateway, averaged over w."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from podserve.kube.simulate.controllers import WorkloadController
from podserve.kube.simulate.cron import active_minutes, is_active
from podserve.kube.simulate.hpa import (
    PodSample,
    external_average_replicas,
    external_value_replicas,
    pods_metric_replicas,
)
from podserve.kube.simulate.objects import Metric, Signal
from podserve.kube.simulate.serving import Fleet
from podserve.kube.simulate.state import Phase
from podserve.kube.simulate.world import World

DEFAULT_RATE_WINDOW_S = 60


class MetricsView:
    def __init__(
        self,
        world: World,
        controllers: Mapping[str, WorkloadController],
        fleets: Mapping[str, Fleet],
        cumulative: Mapping[str, np.ndarray],
    ) -> None:
        self.world = world
        self.controllers = controllers
        self.fleets = fleets
        self.cumulative = {k: v.tolist() for k, v in cumulative.items()}
        self._cron: dict[tuple[str, str], list[bool]] = {}

    def _schedule(self, metric: Metric, now: float) -> float:
        assert metric.schedule is not None
        table = self._cron.get(metric.schedule)
        if table is None:
            table = active_minutes(*metric.schedule)
            self._cron[metric.schedule] = table
        return metric.activation + 1.0 if is_active(table, now) else 0.0

    def _per_pod(self, signal: Signal, name: str) -> float:
        fleet = self.fleets.get(name)
        ready = self.world.ready.get(name, 0)
        if fleet is None or ready == 0:
            return 0.0
        c = fleet.params.concurrency
        held = fleet.occupancy
        if signal is Signal.QUEUE:
            return max(0.0, held - ready * c) / ready
        if signal is Signal.LATENCY:
            return fleet.last_p99_s
        if signal is Signal.CPU:
            return 100.0 * min(held / ready, c) / c
        return held / ready

    def rate(self, name: str, window_s: int, now: float) -> float:
        cum = self.cumulative.get(name)
        if cum is None:
            return 0.0
        t = min(int(now), len(cum) - 1)
        window = window_s or DEFAULT_RATE_WINDOW_S
        start = max(0, t - window)
        return float(cum[t] - cum[start]) / max(1, t - start) if t > start else 0.0

    def total(self, metric: Metric, name: str, now: float) -> float:
        if metric.signal is Signal.RATE:
            return self.rate(name, metric.rate_window_s, now)
        if metric.signal is Signal.SCHEDULE:
            return self._schedule(metric, now)
        fleet = self.fleets.get(name)
        if fleet is None:
            return 0.0
        ready = self.world.ready.get(name, 0)
        if metric.signal is Signal.INFLIGHT:
            draining = sum(p.inflight for p in self.world.terminating if p.owner == name)
            return fleet.occupancy + draining
        if metric.signal is Signal.QUEUE:
            return max(0.0, fleet.occupancy - ready * fleet.params.concurrency)
        return self._per_pod(metric.signal, name)

    def proposal(
        self,
        metric: Metric,
        name: str,
        current: int,
        tolerance: tuple[float, float],
        now: float,
    ) -> int | None:
        controller = self.controllers[name]
        if metric.source == "External":
            value = self.total(metric, name, now)
            if metric.target_type == "AverageValue":
                status = len(controller.active())
                return external_average_replicas(status, value, metric.target, tolerance)
            ready = self.world.ready.get(name, 0)
            return external_value_replicas(current, ready, value, metric.target, tolerance)
        value = self._per_pod(metric.signal, name)
        cpu = metric.signal is Signal.CPU
        samples = []
        for pod in controller.live():
            if pod.phase >= Phase.TERMINATING:
                continue  # deleted pods are ignored
            if pod.phase is Phase.PENDING or not pod.is_running(now):
                samples.append(PodSample(None, unready=True))
            elif pod.phase is Phase.STARTING:
                # CPU: not Ready within the initialization period counts as unready.
                samples.append(PodSample(None, unready=True) if cpu else PodSample(0.0))
            else:
                samples.append(PodSample(value))
        return pods_metric_replicas(
            current,
            samples,
            metric.target,
            tolerance,
            missing_down_value=max(100.0, metric.target) if cpu else None,
        )
