"""The autoscalers' rounds over the workloads: every HPA each sync period (15 s), each
ScaledObject at its polling interval and its KEDA-made HPA with the others; every change of a
workload's replicas is recorded as a scale event. A `metrics-down` event makes every metric
read fail for its duration."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from podserve.kube.simulate.controllers import WorkloadController
from podserve.kube.simulate.hpa import HpaController
from podserve.kube.simulate.keda import KedaController
from podserve.kube.simulate.metrics import MetricsView
from podserve.kube.simulate.objects import Hpa


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    t: float
    workload: str
    before: int
    after: int
    reason: str


class Autoscaling:
    def __init__(
        self,
        controllers: Mapping[str, WorkloadController],
        metrics: MetricsView,
        hpas: Sequence[tuple[Hpa, HpaController]],
        kedas: Sequence[KedaController],
    ) -> None:
        self.controllers = controllers
        self.metrics = metrics
        self.hpas = hpas
        self.kedas = kedas
        self.events: list[ScaleEvent] = []
        self.metrics_down_until = -1.0

    def metrics_down_for(self, now: float, seconds: float) -> None:
        self.metrics_down_until = max(self.metrics_down_until, now + seconds)

    def _down(self, now: float) -> bool:
        return now < self.metrics_down_until

    def _scale(self, name: str, to: int, now: float, reason: str) -> None:
        controller = self.controllers[name]
        if to != controller.replicas:
            self.events.append(ScaleEvent(now, name, controller.replicas, to, reason))
            controller.set_replicas(to)

    def hpa_round(self, now: float) -> None:
        down = self._down(now)
        for spec, hpa in self.hpas:
            controller = self.controllers[spec.target]
            proposals = [
                None
                if down
                else self.metrics.proposal(
                    m, spec.target, controller.replicas, hpa.tolerance(), now
                )
                for m in spec.metrics
            ]
            desired = hpa.reconcile(now, controller.replicas, proposals)
            self._scale(spec.target, desired, now, f"hpa {spec.name}: {hpa.last_reason}")
            hpa.prune(now)
        for keda in self.kedas:
            target = keda.spec.target
            controller = self.controllers[target]
            if keda.fallback_active or controller.replicas == 0:
                continue  # KEDA owns 0 ↔ 1 and the fallback; its HPA the rest
            proposals = [
                None
                if down
                else self.metrics.proposal(
                    m, target, controller.replicas, keda.hpa.tolerance(), now
                )
                for m in keda.spec.triggers
            ]
            desired = keda.hpa.reconcile(now, controller.replicas, proposals)
            self._scale(target, desired, now, f"keda-hpa-{keda.spec.name}: {keda.hpa.last_reason}")
            keda.hpa.prune(now)

    def keda_polls(self, now: float) -> None:
        for keda in self.kedas:
            if now < keda.next_poll_t:
                continue
            target = keda.spec.target
            values = None
            if not self._down(now):
                values = [self.metrics.total(m, target, now) for m in keda.spec.triggers]
            decided = keda.poll(now, self.controllers[target].replicas, values)
            if decided is not None:
                self._scale(target, decided, now, f"keda {keda.spec.name}: {keda.last_reason}")
