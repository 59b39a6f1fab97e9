"""The simulator's objects that change: nodes and pods, with the phases a pod goes through
(Pending → bound and starting → Ready → Terminating → gone)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from podserve.kube.simulate.cluster import NodePool, Taint
from podserve.kube.simulate.objects import PodTemplate
from podserve.kube.simulate.resources import PODS, Amounts, add


class Phase(IntEnum):
    PENDING = 0  # not bound to a node (phase Pending)
    STARTING = 1  # bound: image pull, init containers (fetch), then the model load
    READY = 2  # Running and Ready: in the Service's endpoints
    TERMINATING = 3  # deletionTimestamp set: preStop, SIGTERM drain, until killed or done
    GONE = 4  # removed: its resources are free again


@dataclass(slots=True, eq=False)
class Node:
    name: str
    pool: NodePool
    labels: dict[str, str]
    taints: tuple[Taint, ...]
    allocatable: Amounts
    created_t: float  # when the cloud was asked for it (billing starts)
    ready_t: float  # when it registered Ready
    used: Amounts = field(default_factory=dict)
    pods: list[Pod] = field(default_factory=list)
    cordoned: bool = False
    images: dict[str, float] = field(default_factory=dict)  # image → time it is on disk
    models: set[str] = field(default_factory=set)  # workloads whose weights are cached here
    removed_t: float | None = None  # reclaim or scale-down: the node is gone at this time
    unneeded_since: float | None = None

    def free(self) -> Amounts:
        return {k: v - self.used.get(k, 0) for k, v in self.allocatable.items()}

    def bind(self, pod: Pod) -> None:
        self.pods.append(pod)
        add(self.used, pod.template.requests)
        add(self.used, {PODS: 1})

    def release(self, pod: Pod) -> None:
        self.pods.remove(pod)
        add(self.used, pod.template.requests, -1)
        add(self.used, {PODS: 1}, -1)


@dataclass(slots=True, eq=False)
class Pod:
    name: str
    owner: str  # workload name (or the tenant group)
    revision: int
    template: PodTemplate
    created_t: float
    ordinal: int = -1  # StatefulSet ordinal
    phase: Phase = Phase.PENDING
    node: Node | None = None
    bound_t: float | None = None
    running_t: float = 0.0  # main container started (after pull and fetch)
    ready_t: float = 0.0  # readiness expected at this time (if it starts within budget)
    became_ready_t: float | None = None
    restarts: int = 0
    deleted_t: float | None = None
    kill_t: float | None = None  # SIGKILL (grace expiry, or the node disappearing)
    inflight: int = 0  # requests it still holds while terminating
    drain_carry: float = 0.0
    nominated: Node | None = None
    reason: str = ""  # last FailedScheduling message
    tenant: bool = False
    evicted: bool = False
    epoch: int = 0  # bumps on every state change, so stale timed events are ignored
    prestop_end_t: float = 0.0
    cut_cause: str = ""  # why its in-flight requests were cut: "reclaim", "grace", ...

    def is_running(self, now: float) -> bool:
        """Phase Running: the main container started (its /metrics answers from here on)."""
        return self.phase is Phase.READY or (self.phase is Phase.STARTING and now >= self.running_t)
