"""The workload controllers: a Deployment's ReplicaSets (rollout.py decides the counts, the
ReplicaSet controller creates and deletes pods) and a StatefulSet's ordinals; each tracks
its rollout for the summary (`progressDeadlineSeconds` → ProgressDeadlineExceeded,
pkg/controller/deployment/progress.go; there is no automatic rollback)."""

from __future__ import annotations

from dataclasses import dataclass

from podserve.kube.simulate.objects import Workload
from podserve.kube.simulate.rollout import (
    OrdinalPod,
    ReplicaSet,
    fenceposts,
    recreate_sync,
    rolling_sync,
    scale_sync,
    statefulset_sync,
)
from podserve.kube.simulate.state import Phase, Pod
from podserve.kube.simulate.world import World

MAX_SYNCS_PER_SECOND = 20


@dataclass(slots=True)
class RolloutRecord:
    started_t: float
    completed_t: float | None = None
    last_progress_t: float = 0.0
    max_unavailable_seen: int = 0
    stalled_reason: str | None = None
    fewest_replicas: int = 0  # the fewest replicas wanted since the rollout started


def _delete_rank(pod: Pod) -> tuple[float, ...]:
    """Which pod a shrinking ReplicaSet deletes first (pkg/controller/controller_utils.go
    ActivePods.Less): unbound, then not running, not ready, ready for less time, more
    restarts, newer."""
    return (
        1.0 if pod.node is not None else 0.0,
        float(pod.phase is Phase.READY),
        -(pod.became_ready_t or 0.0),
        -float(pod.restarts),
        -pod.created_t,
    )


class WorkloadController:
    def __init__(self, workload: Workload, world: World) -> None:
        self.workload = workload
        self.world = world
        self.replicas = workload.replicas
        self.revision = 0
        self.sets: list[ReplicaSet] = [ReplicaSet(0, 0)]  # oldest first, newest last
        self.rollout: RolloutRecord | None = None
        self._new_available = 0
        world.dirty_owners.add(workload.name)

    @property
    def name(self) -> str:
        return self.workload.name

    def live(self) -> list[Pod]:
        return self.world.pods.get(self.name, [])

    def active(self) -> list[Pod]:
        return [p for p in self.live() if p.phase < Phase.TERMINATING]

    def available(self, pod: Pod, now: float) -> bool:
        return (
            pod.phase is Phase.READY
            and pod.became_ready_t is not None
            and now >= pod.became_ready_t + self.workload.min_ready_s
        )

    def start_rollout(self, now: float) -> None:
        self.revision += 1
        self.sets.append(ReplicaSet(self.revision, 0))
        self.rollout = RolloutRecord(
            started_t=now, last_progress_t=now, fewest_replicas=self.replicas
        )
        self._new_available = 0
        self.world.dirty_owners.add(self.name)

    def set_replicas(self, replicas: int) -> None:
        if replicas != self.replicas:
            self.replicas = replicas
            self.world.dirty_owners.add(self.name)

    def sync(self, now: float) -> None:
        if self.workload.kind == "StatefulSet":
            self._sync_statefulset(now)
        else:
            for _ in range(MAX_SYNCS_PER_SECOND):
                if not self._sync_deployment(now):
                    break
        self._track(now)

    # -- Deployment ----------------------------------------------------------------------
    def _sync_deployment(self, now: float) -> bool:
        new, olds = self.sets[-1], self.sets[:-1]
        active = self.active()
        for rs in self.sets:
            rs.available = sum(
                1 for p in active if p.revision == rs.revision and self.available(p, now)
            )
        if self.workload.strategy == "Recreate":
            old_running = any(p.revision != new.revision for p in self.live())
            changed = recreate_sync(self.replicas, new, olds, old_running)
        elif not any(rs.replicas for rs in olds) and not any(
            p.revision != new.revision for p in active
        ):
            changed = scale_sync(self.replicas, new, olds)
        else:
            changed = rolling_sync(
                self.replicas, self.workload.max_surge, self.workload.max_unavailable, new, olds
            )
        if self.rollout is not None and (changed or new.available > self._new_available):
            # Progress: a ReplicaSet scaled or a new pod became available (progress.go).
            self.rollout.last_progress_t = now
        self._new_available = new.available
        return self._reconcile_pods(now) or changed

    def _reconcile_pods(self, now: float) -> bool:
        changed = False
        active = self.active()
        for rs in self.sets:
            mine = [p for p in active if p.revision == rs.revision]
            for _ in range(rs.replicas - len(mine)):
                self.world.create_pod(self.name, rs.revision, self.workload.template, now)
                changed = True
            if len(mine) > rs.replicas:
                for pod in sorted(mine, key=_delete_rank)[: len(mine) - rs.replicas]:
                    self.world.delete(pod, now)
                    changed = True
        return changed

    # -- StatefulSet ---------------------------------------------------------------------
    def _sync_statefulset(self, now: float) -> None:
        pods = self.live()
        view = [
            OrdinalPod(p.ordinal, p.revision, p.phase is Phase.READY, p.phase is Phase.TERMINATING)
            for p in pods
        ]
        actions = statefulset_sync(
            self.replicas,
            view,
            self.revision,
            self.workload.parallel,
            rolling=self.workload.strategy == "RollingUpdate",
        )
        for ordinal in actions.create:
            self.world.create_pod(
                self.name, self.revision, self.workload.template, now, ordinal=ordinal
            )
        by_ordinal = {p.ordinal: p for p in pods}
        for ordinal in actions.delete:
            self.world.delete(by_ordinal[ordinal], now)
        if (actions.create or actions.delete) and self.rollout is not None:
            self.rollout.last_progress_t = now

    # -- rollout status ------------------------------------------------------------------
    def complete(self, now: float) -> bool:
        active = self.active()
        updated = [p for p in active if p.revision == self.revision]
        return (
            len(updated) == self.replicas
            and len(active) == self.replicas
            and sum(1 for p in updated if self.available(p, now)) == self.replicas
        )

    def _track(self, now: float) -> None:
        record = self.rollout
        if record is None or record.completed_t is not None:
            return
        if self.complete(now):
            record.completed_t = now
            return
        if record.stalled_reason is None and now - record.last_progress_t > (
            self.workload.progress_deadline_s
        ):
            pending = [p for p in self.live() if p.phase is Phase.PENDING and p.reason]
            why = f": {pending[0].name} Pending: {pending[0].reason}" if pending else ""
            record.stalled_reason = f"ProgressDeadlineExceeded{why}"

    def observe(self, now: float) -> None:
        """Per second during a rollout: the most replicas short of Ready, against the
        fewest replicas wanted since the rollout started (so an autoscaler's scale-up during
        the rollout, whose new pods are still loading, is not blamed on the rollout)."""
        record = self.rollout
        if record is None or record.completed_t is not None:
            return
        ready = self.world.ready.get(self.name, 0)
        record.fewest_replicas = min(record.fewest_replicas, self.replicas)
        wanted = record.fewest_replicas
        record.max_unavailable_seen = max(record.max_unavailable_seen, wanted - ready)
        if now - record.last_progress_t > self.workload.progress_deadline_s:
            self._track(now)

    def fenceposts(self) -> tuple[int, int]:
        return fenceposts(self.workload.max_surge, self.workload.max_unavailable, self.replicas)
