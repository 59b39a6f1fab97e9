"""The cluster's moving parts on the virtual clock: nodes that register and disappear, pods
that bind, start, become Ready and terminate, and the timed events between (a heap, so an
idle second costs nothing).

Kubelet rules (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/):
- a bound pod pulls its image (once per node: the node keeps it), runs its init containers
  (the model fetch; a hostPath cache makes a second pod on the node skip it), then starts the
  server, which is Ready after the model load;
- a startup probe that runs out (initialDelaySeconds + failureThreshold x periodSeconds) before
  the load ends kills the container, restarted after the CrashLoop back-off of 10 s doubling to
  300 s (pkg/kubelet/kubelet.go MaxContainerBackOff), so such a pod is never Ready;
- deletion removes the pod from the endpoints at once, runs preStop inside the grace period,
  then SIGTERM: podserve drains what it holds and exits; at the end of the grace period SIGKILL
  cuts what is left; resources are free once the pod is gone;
- a spot reclaim gives the kubelet's graceful node shutdown only the pool's share of the notice
  (GKE: 15 s of 30 s for ordinary pods), then the node is gone."""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from podserve.kube.simulate.cluster import Cluster, NodePool, Taint
from podserve.kube.simulate.objects import PodTemplate
from podserve.kube.simulate.resources import PODS, amounts, gpu_count
from podserve.kube.simulate.scheduler import Scheduler
from podserve.kube.simulate.state import Node, Phase, Pod

MAX_BACKOFF_S = 300.0
FIRST_BACKOFF_S = 10.0
DEFAULT_MAX_PODS = 110  # kubelet --max-pods
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
POOL_LABEL = "podserve.dev/node-pool"


@dataclass(slots=True)
class Counters:
    served: int = 0
    rejected: int = 0
    cut: int = 0
    cut_by_cause: dict[str, int] = field(default_factory=dict)
    restarts: int = 0
    gpu_seconds: float = 0.0
    cost_usd: float = 0.0
    evictions_refused: int = 0
    evictions: int = 0


class World:
    def __init__(self, cluster: Cluster, scheduler: Scheduler) -> None:
        self.cluster = cluster
        self.scheduler = scheduler
        self.nodes: list[Node] = []
        self.provisioning: list[Node] = []
        self.pods: dict[str, list[Pod]] = {}  # owner → pods not yet gone
        self.pending: list[Pod] = []
        self.terminating: list[Pod] = []
        self.ready: dict[str, int] = {}
        self.counters = Counters()
        self.log: list[tuple[float, str]] = []
        # (t, "bind" | "gone", pod, node): the placements, for tests and the summary's log.
        self.history: list[tuple[float, str, str, str]] = []
        self.dirty_owners: set[str] = set()
        self.dirty_schedule = True
        self.version = 0  # bumps when bindings or nodes change (cluster-autoscaler cache)
        self.cost_rate_per_s = 0.0
        self.gpus_bound = 0  # GPUs held by the input's pods
        self.on_ready: Callable[[Pod], None] = lambda pod: None
        self.on_leave: Callable[[Pod], int] = lambda pod: 0
        self._heap: list[tuple[float, int, str, object, int]] = []
        self._seq = itertools.count()
        self._pool_index: dict[str, itertools.count[int]] = {}
        self.pod_names: dict[str, itertools.count[int]] = {}

    # -- timed events -------------------------------------------------------------------
    def push(self, t: float, kind: str, obj: object, epoch: int = 0) -> None:
        heapq.heappush(self._heap, (t, next(self._seq), kind, obj, epoch))

    def next_due(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    def pop_due(self, now: float) -> Iterable[tuple[str, object, int]]:
        while self._heap and self._heap[0][0] <= now:
            _, _, kind, obj, epoch = heapq.heappop(self._heap)
            yield kind, obj, epoch

    # -- nodes ----------------------------------------------------------------------------
    def add_node(self, pool: NodePool, now: float, ready_t: float) -> Node:
        index = next(self._pool_index.setdefault(pool.name, itertools.count()))
        name = f"{pool.name}-{index}"
        labels = {**pool.labels, HOSTNAME: name, POOL_LABEL: pool.name}
        if pool.zones:
            labels[ZONE] = pool.zones[index % len(pool.zones)]
        allocatable = amounts(pool.allocatable)
        allocatable.setdefault(PODS, DEFAULT_MAX_PODS)
        node = Node(name, pool, labels, tuple(pool.taints), allocatable, now, ready_t)
        self.cost_rate_per_s += pool.price_per_hour_usd / 3600.0
        if ready_t <= now:
            self._register(node)
        else:
            self.provisioning.append(node)
            self.push(ready_t, "node-ready", node)
        return node

    def _register(self, node: Node) -> None:
        if node in self.provisioning:
            self.provisioning.remove(node)
        self.nodes.append(node)
        self.dirty_schedule = True
        self.version += 1

    def node_ready(self, node: Node) -> None:
        if node.removed_t is None:
            self._register(node)

    def pool_size(self, pool: str) -> int:
        live = [n for n in self.nodes + self.provisioning if n.removed_t is None]
        return sum(1 for n in live if n.pool.name == pool)

    def reclaim(self, node: Node, now: float, notice_s: float, shutdown_s: float) -> None:
        """Spot reclaim: cordon + taint now, every pod deleted with its grace capped at the
        kubelet's shutdown share, the node gone when the notice ends."""
        node.cordoned = True
        node.taints = (
            *node.taints,
            Taint(key="node.kubernetes.io/unschedulable", effect="NoSchedule"),
        )
        node.removed_t = now + notice_s
        for pod in list(node.pods):
            self.delete(pod, now, cap_s=shutdown_s, cause="reclaim")
        self.push(now + notice_s, "node-gone", node)
        self.dirty_schedule = True

    def remove_node(self, node: Node, now: float) -> None:
        for pod in list(node.pods):
            self._gone(pod, now, cause=pod.cut_cause or "node removed")
        if node in self.nodes:
            self.nodes.remove(node)
            self.cost_rate_per_s -= node.pool.price_per_hour_usd / 3600.0
        elif node in self.provisioning:
            self.provisioning.remove(node)
            self.cost_rate_per_s -= node.pool.price_per_hour_usd / 3600.0
        node.removed_t = now
        self.version += 1
        self.dirty_schedule = True

    # -- pods -----------------------------------------------------------------------------
    def create_pod(
        self,
        owner: str,
        revision: int,
        template: PodTemplate,
        now: float,
        ordinal: int = -1,
        tenant: bool = False,
        name: str | None = None,
    ) -> Pod:
        if name is None:
            n = next(self.pod_names.setdefault(owner, itertools.count()))
            name = f"{owner}-{ordinal}" if ordinal >= 0 else f"{owner}-r{revision}-{n}"
        pod = Pod(name, owner, revision, template, now, ordinal=ordinal, tenant=tenant)
        self.pods.setdefault(owner, []).append(pod)
        self.pending.append(pod)
        self.dirty_schedule = True
        return pod

    def bind(self, pod: Pod, node: Node, now: float) -> None:
        node.bind(pod)
        pod.node = node
        pod.nominated = None
        pod.reason = ""
        pod.bound_t = now
        pod.phase = Phase.STARTING
        pod.epoch += 1
        self.pending.remove(pod)
        self.history.append((now, "bind", pod.name, node.name))
        self.version += 1
        if not pod.tenant:
            self.gpus_bound += gpu_count(pod.template.requests)
        if pod.tenant:
            pod.phase = Phase.READY  # already running: nothing to pull or load
            pod.became_ready_t = now
            self.ready[pod.owner] = self.ready.get(pod.owner, 0) + 1
            return
        template = pod.template
        pulled = node.images.get(template.image)
        if pulled is None:
            pulled = now + node.pool.image_pull_seconds
            node.images[template.image] = pulled
        start = max(now, pulled)
        fetch_s = 0.0
        if template.fetches and template.model_size_gb > 0:
            if not (template.shared_cache and pod.owner in node.models):
                fetch_s = template.model_size_gb * 8.0 / node.pool.model_fetch_gbps
            if template.shared_cache:
                node.models.add(pod.owner)
        pod.running_t = start + fetch_s
        self._plan_start(pod)

    def _plan_start(self, pod: Pod) -> None:
        template = pod.template
        budget = template.startup_budget_s
        if budget is not None and template.load_s > budget:
            self.push(pod.running_t + budget, "pod-restart", pod, pod.epoch)
        else:
            pod.ready_t = pod.running_t + template.load_s
            self.push(pod.ready_t, "pod-ready", pod, pod.epoch)

    def restart(self, pod: Pod, now: float) -> None:
        pod.restarts += 1
        self.counters.restarts += 1
        backoff = min(MAX_BACKOFF_S, FIRST_BACKOFF_S * 2 ** (pod.restarts - 1))
        pod.running_t = now + backoff
        pod.epoch += 1
        self._plan_start(pod)

    def make_ready(self, pod: Pod, now: float) -> None:
        pod.phase = Phase.READY
        pod.became_ready_t = now
        pod.epoch += 1
        self.ready[pod.owner] = self.ready.get(pod.owner, 0) + 1
        self.dirty_owners.add(pod.owner)
        self.on_ready(pod)

    def delete(self, pod: Pod, now: float, cap_s: float | None = None, cause: str = "") -> None:
        """Graceful deletion (the API's DELETE, a preemption or an eviction)."""
        if pod.phase >= Phase.TERMINATING:
            if cap_s is not None and pod.kill_t is not None and now + cap_s < pod.kill_t:
                pod.kill_t = now + cap_s
                pod.cut_cause = cause
                self.push(pod.kill_t, "pod-kill", pod, pod.epoch)
            return
        self.dirty_owners.add(pod.owner)
        if pod.phase is Phase.PENDING:
            self.pending.remove(pod)
            pod.phase = Phase.GONE
            self.pods[pod.owner].remove(pod)
            return
        was_running = pod.is_running(now)
        if pod.phase is Phase.READY:
            self.ready[pod.owner] -= 1
            pod.inflight = self.on_leave(pod)
        pod.phase = Phase.TERMINATING
        pod.deleted_t = now
        pod.epoch += 1
        pod.cut_cause = cause or "grace"
        grace = pod.template.grace_s if cap_s is None else min(pod.template.grace_s, cap_s)
        pod.kill_t = now + grace
        pod.prestop_end_t = now + min(pod.template.pre_stop_s, grace) if was_running else now
        self.terminating.append(pod)
        if pod.inflight == 0:
            self.push(pod.prestop_end_t, "pod-exit", pod, pod.epoch)
        else:
            self.push(pod.kill_t, "pod-kill", pod, pod.epoch)

    def _gone(self, pod: Pod, now: float, cause: str = "") -> None:
        if pod.phase is Phase.GONE:
            return
        if pod.phase is Phase.PENDING:
            self.pending.remove(pod)
        if pod.phase is Phase.READY:
            self.ready[pod.owner] -= 1
            pod.inflight = self.on_leave(pod)
        if pod.inflight:
            self.counters.cut += pod.inflight
            key = cause or pod.cut_cause or "grace"
            self.counters.cut_by_cause[key] = self.counters.cut_by_cause.get(key, 0) + pod.inflight
            pod.inflight = 0
        if pod in self.terminating:
            self.terminating.remove(pod)
        if pod.node is not None:
            self.history.append((now, "gone", pod.name, pod.node.name))
            pod.node.release(pod)
            if not pod.tenant:
                self.gpus_bound -= gpu_count(pod.template.requests)
        pod.phase = Phase.GONE
        pod.epoch += 1
        self.pods[pod.owner].remove(pod)
        self.dirty_owners.add(pod.owner)
        self.dirty_schedule = True
        self.version += 1

    def finish(self, pod: Pod, now: float) -> None:
        """The pod's containers exited (drained, or killed at the end of its grace)."""
        self._gone(pod, now)

    def handle(self, kind: str, obj: object, epoch: int, now: float) -> bool:
        """Apply one timed event of the world; False if it is not the world's."""
        if kind == "node-ready" and isinstance(obj, Node):
            self.node_ready(obj)
        elif kind == "node-gone" and isinstance(obj, Node):
            self.remove_node(obj, now)
        elif isinstance(obj, Pod) and epoch == obj.epoch:
            if kind == "pod-ready":
                self.make_ready(obj, now)
            elif kind == "pod-restart":
                self.restart(obj, now)
            elif kind in {"pod-exit", "pod-kill"}:
                self.finish(obj, now)
        elif not isinstance(obj, Pod):
            return False
        return True

    # -- scheduling -----------------------------------------------------------------------
    def schedule_pending(self, now: float) -> None:
        self.dirty_schedule = False
        queue = sorted(self.pending, key=lambda p: (-p.template.priority, p.created_t, p.name))
        for pod in queue:
            if pod.phase is not Phase.PENDING:
                continue
            reserved: dict[str, dict[str, int]] = {}
            for other in self.pending:
                if (
                    other is not pod
                    and other.nominated is not None
                    and other.template.priority >= pod.template.priority
                ):
                    into = reserved.setdefault(other.nominated.name, {})
                    for k, v in other.template.requests.items():
                        into[k] = into.get(k, 0) + v
                    into[PODS] = into.get(PODS, 0) + 1
            decision = self.scheduler.schedule(pod, self.nodes, reserved)
            if decision.node is not None:
                self.bind(pod, decision.node, now)
                continue
            pod.reason = decision.message or pod.reason
            if decision.nominated is not None:
                pod.nominated = decision.nominated
                for victim in decision.victims:
                    self.log.append(
                        (now, f"{pod.name} preempts {victim.name} on {decision.nominated.name}")
                    )
                    self.delete(victim, now, cause="preempted")
