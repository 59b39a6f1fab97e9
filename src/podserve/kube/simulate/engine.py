"""The simulation loop: one tick per simulated second. Timed events (pods starting, nodes
registering, the user's events) come off a heap; controllers run only when something they
watch changed; autoscalers run on their own periods; serving is aggregate arithmetic. The
result is deterministic for a seed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from podserve.core.errors import InvalidInput
from podserve.kube.simulate.autoscaler import ClusterAutoscaler
from podserve.kube.simulate.cluster import Cluster
from podserve.kube.simulate.controllers import RolloutRecord, WorkloadController
from podserve.kube.simulate.events import Event
from podserve.kube.simulate.eviction import EvictionApi
from podserve.kube.simulate.hpa import SYNC_PERIOD_S, HpaController
from podserve.kube.simulate.keda import KedaController
from podserve.kube.simulate.metrics import MetricsView
from podserve.kube.simulate.objects import Pdb, PodTemplate, Scenario, ServingParams, Toleration
from podserve.kube.simulate.pdb import PdbStatus
from podserve.kube.simulate.resources import amounts
from podserve.kube.simulate.scaling import Autoscaling, ScaleEvent
from podserve.kube.simulate.scheduler import Scheduler
from podserve.kube.simulate.serving import Fleet, drain_step
from podserve.kube.simulate.state import Node, Pod
from podserve.kube.simulate.traffic import Trace, arrivals, split
from podserve.kube.simulate.world import POOL_LABEL, World

COLUMNS = (
    "replicas_desired",
    "replicas_ready",
    "pending_pods",
    "queue_depth",
    "inflight",
    "offered",
    "served",
    "rejected",
    "cut",
    "gpus_in_use",
    "nodes",
    "cost_usd",
    "latency_p99_s",
)


@dataclass(frozen=True, slots=True)
class Options:
    duration_s: int
    seed: int = 0
    events: tuple[Event, ...] = ()
    progress: Callable[[int, int], None] | None = None


@dataclass(slots=True)
class Result:
    duration_s: int
    timeline: dict[str, np.ndarray]
    scale_events: list[ScaleEvent]
    rollouts: dict[str, RolloutRecord]
    unschedulable: list[tuple[str, str]]
    offered: int
    served: int
    rejected: int
    cut: int
    cut_by_cause: dict[str, int]
    restarts: int
    gpu_hours: float
    cost_usd: float
    evictions: int
    evictions_refused: list[tuple[float, str, str]]  # (t, pod, pdb)
    rejected_at_zero: int
    events: tuple[Event, ...]
    capacity: dict[str, ServingParams]
    workloads: dict[str, str]  # name → kind
    log: list[tuple[float, str]]
    spot_grace: list[tuple[str, float, float]] = field(default_factory=list)


def tenant_template(requests: dict[str, int], priority: int, pool: str | None) -> PodTemplate:
    return PodTemplate(
        labels={"podserve.dev/tenant": "true"},
        requests=requests,
        node_selector={POOL_LABEL: pool} if pool else {},
        affinity_terms=(),
        tolerations=(Toleration("", "Exists", "", ""),),
        spread=(),
        priority=priority,
        preempts=False,
        grace_s=30.0,
        pre_stop_s=0.0,
        startup_budget_s=None,
        load_s=0.0,
        model_size_gb=0.0,
        fetches=False,
        shared_cache=False,
        image="",
        serves=False,
    )


class Simulation:
    def __init__(self, scenario: Scenario, cluster: Cluster, trace: Trace, options: Options):
        self.scenario = scenario
        self.cluster = cluster
        self.options = options
        self.world = World(cluster, Scheduler(cluster.spec.extended_resource_toleration))
        world = self.world
        for pool in cluster.spec.node_pools:
            for _ in range(pool.count):
                world.add_node(pool, 0.0, 0.0)
        for tenant in cluster.spec.pods:
            template = tenant_template(amounts(tenant.requests), tenant.priority, tenant.node_pool)
            for i in range(tenant.count):
                world.create_pod(
                    tenant.name, 0, template, 0.0, tenant=True, name=f"{tenant.name}-{i}"
                )
        if world.pending:
            world.schedule_pending(0.0)  # other tenants are already running when we apply
        self.controllers = {w.name: WorkloadController(w, world) for w in scenario.workloads}
        self.fleets = {
            w.name: Fleet(w.serving) for w in scenario.workloads if w.serving is not None
        }
        world.on_leave = self._on_leave
        names = sorted(self.fleets)
        total = arrivals(trace, options.duration_s, options.seed)
        shares = [scenario.traffic_weights.get(n, 0.0) for n in names]
        parts = split(total, shares, options.seed)
        self.arrivals = {n: part.tolist() for n, part in zip(names, parts, strict=True)}
        self.offered_total = total.tolist()
        self.metrics = MetricsView(
            world,
            self.controllers,
            self.fleets,
            {n: np.concatenate(([0], np.cumsum(p))) for n, p in zip(names, parts, strict=True)},
        )
        self.hpas = [
            (h, HpaController(h.min_replicas, h.max_replicas, h.behavior))
            for h in scenario.hpas
            if h.target in self.controllers
        ]
        self.kedas = [
            KedaController.for_spec(s)
            for s in scenario.scaled_objects
            if s.target in self.controllers
        ]
        pools = list(cluster.spec.node_pools)
        self.autoscaler = (
            ClusterAutoscaler(cluster.spec.autoscaler, pools, world)
            if any(p.min_nodes != p.max_nodes for p in pools)
            else None
        )
        self.eviction = EvictionApi(world, self.controllers, scenario.pdbs)
        self.scaling = Autoscaling(self.controllers, self.metrics, self.hpas, self.kedas)
        self.rejected_at_zero = 0
        self.columns: dict[str, list[float]] = {c: [] for c in COLUMNS}
        self.serving_names = sorted(self.fleets)
        self.last_cut = 0
        self.t = 0
        for event in options.events:
            self._check(event)
            world.push(event.t, "user", event)

    # -- inputs ---------------------------------------------------------------------------
    def _check(self, event: Event) -> None:
        pools = {p.name: p for p in self.cluster.spec.node_pools}
        if event.kind == "spot-reclaim" and event.arg not in pools:
            raise InvalidInput(
                f"--event {event.label()}: no node pool {event.arg!r} "
                f"(pools: {', '.join(sorted(pools))})"
            )
        if event.kind == "rollout" and event.arg and event.arg not in self.controllers:
            raise InvalidInput(
                f"--event {event.label()}: no workload {event.arg!r} "
                f"(workloads: {', '.join(sorted(self.controllers))})"
            )

    def _on_leave(self, pod: Pod) -> int:
        fleet = self.fleets.get(pod.owner)
        if fleet is None:
            return 0
        return fleet.take_share(self.world.ready.get(pod.owner, 0) + 1)

    # -- PDB and eviction (eviction.py) --------------------------------------------------
    def pdb_status(self, pdb: Pdb) -> PdbStatus:
        return self.eviction.status(pdb)

    def evict(self, pod: Pod, now: float, dry_run: bool = False) -> bool:
        return self.eviction.evict(pod, now, dry_run)

    @property
    def refused(self) -> list[tuple[float, str, str]]:
        return self.eviction.refused

    # -- user events ----------------------------------------------------------------------
    def _user(self, event: Event, now: float) -> None:
        world = self.world
        world.log.append((now, f"event {event.label()}"))
        if event.kind == "rollout":
            for name, controller in self.controllers.items():
                if (event.arg is None and name in self.fleets) or event.arg == name:
                    controller.start_rollout(now)
        elif event.kind == "metrics-down":
            self.scaling.metrics_down_for(now, float(event.arg or 0))
        elif event.kind == "spot-reclaim":
            for node in list(world.nodes) + list(world.provisioning):
                if node.pool.name == event.arg and node.removed_t is None:
                    pool = node.pool
                    shutdown = (
                        pool.reclaim_notice_seconds
                        if pool.pod_shutdown_seconds is None
                        else pool.pod_shutdown_seconds
                    )
                    world.reclaim(node, now, pool.reclaim_notice_seconds, shutdown)
        elif event.kind == "node-drain":
            target = next((n for n in world.nodes if n.name == event.arg), None)
            if target is None:
                world.log.append((now, f"node-drain: no node {event.arg!r}"))
                return
            target.cordoned = True
            world.dirty_schedule = True
            self.eviction.drain(target, now)

    # -- the loop -------------------------------------------------------------------------
    def run(self) -> Result:
        """Every second of the duration, then the result."""
        duration = self.options.duration_s
        progress = self.options.progress
        report_every = max(1, duration // 20)
        for t in range(self.t, duration):
            self.step(t)
            if progress is not None and (t + 1) % report_every == 0:
                progress(t + 1, duration)
        return self._result(self.columns)

    def step(self, t: int) -> None:
        """Simulate second `t` (seconds must come in order, each once)."""
        world = self.world
        columns = self.columns
        serving_names = self.serving_names
        self.t = t + 1
        now = float(t)
        if world.next_due() <= now:
            for kind, obj, epoch in list(world.pop_due(now)):
                if world.handle(kind, obj, epoch, now):
                    continue
                if kind == "user" and isinstance(obj, Event):
                    self._user(obj, now)
                elif (
                    kind == "drain-retry"
                    and isinstance(obj, Node)
                    and (obj.removed_t is None or obj.removed_t > now)
                ):
                    self.eviction.drain(obj, now)
        if world.dirty_owners:
            dirty, world.dirty_owners = world.dirty_owners, set()
            for name in sorted(dirty):
                controller = self.controllers.get(name)
                if controller is not None:
                    controller.sync(now)
        if world.dirty_schedule and world.pending:
            world.schedule_pending(now)
        if t % SYNC_PERIOD_S == 0:
            self.scaling.hpa_round(now)
        self.scaling.keda_polls(now)
        if self.autoscaler is not None and now >= self.autoscaler.next_scan_t:
            self.autoscaler.scan(now, self.evict)
        # Serving.
        served = rejected = 0
        p99 = 0.0
        queue = inflight = 0.0
        for name in serving_names:
            fleet = self.fleets[name]
            ready = world.ready.get(name, 0)
            done, refused, latency = fleet.step(self.arrivals[name][t], ready)
            served += done
            rejected += refused
            if ready == 0:
                self.rejected_at_zero += refused
            p99 = max(p99, latency)
            params = fleet.params
            queue += max(0.0, fleet.occupancy - ready * params.concurrency)
            inflight += fleet.occupancy
        if not serving_names:
            rejected += self.offered_total[t]  # nothing serves: every request fails
        for pod in list(world.terminating):
            owner = self.fleets.get(pod.owner)
            if owner is not None and pod.inflight:
                done, pod.drain_carry = drain_step(owner.params, pod.inflight, pod.drain_carry)
                pod.inflight -= done
                served += done
                inflight += pod.inflight
                if pod.inflight == 0:
                    world.push(max(now, pod.prestop_end_t), "pod-exit", pod, pod.epoch)
        counters = world.counters
        counters.served += served
        counters.rejected += rejected
        counters.cost_usd += world.cost_rate_per_s
        counters.gpu_seconds += world.gpus_bound
        for controller in self.controllers.values():
            controller.observe(now)
        columns["replicas_desired"].append(sum(self.controllers[n].replicas for n in serving_names))
        columns["replicas_ready"].append(sum(world.ready.get(n, 0) for n in serving_names))
        columns["pending_pods"].append(sum(1 for p in world.pending if not p.tenant))
        columns["queue_depth"].append(queue)
        columns["inflight"].append(inflight)
        columns["offered"].append(self.offered_total[t])
        columns["served"].append(served)
        columns["rejected"].append(rejected)
        columns["cut"].append(counters.cut - self.last_cut)
        self.last_cut = counters.cut
        columns["gpus_in_use"].append(world.gpus_bound)
        columns["nodes"].append(len(world.nodes))
        columns["cost_usd"].append(counters.cost_usd)
        columns["latency_p99_s"].append(p99)

    def _finish_in_flight(self) -> int:
        """After the last second nothing else happens: what ready pods hold completes."""
        left = sum(f.in_system for f in self.fleets.values())
        left += sum(p.inflight for p in self.world.terminating if p.inflight)
        return left

    def result(self) -> Result:
        """The result of the seconds simulated so far."""
        return self._result(self.columns)

    def _result(self, columns: dict[str, list[float]]) -> Result:
        world = self.world
        counters = world.counters
        tail = self._finish_in_flight()
        timeline = {name: np.asarray(values, dtype=np.float64) for name, values in columns.items()}
        return Result(
            duration_s=len(columns["served"]),
            timeline=timeline,
            scale_events=self.scaling.events,
            rollouts={n: c.rollout for n, c in self.controllers.items() if c.rollout},
            unschedulable=[
                (p.name, p.reason)
                for p in sorted(world.pending, key=lambda p: p.name)
                if not p.tenant and p.reason
            ],
            offered=int(sum(self.offered_total)),
            served=counters.served + tail,
            rejected=counters.rejected,
            cut=counters.cut,
            cut_by_cause=dict(counters.cut_by_cause),
            restarts=counters.restarts,
            gpu_hours=counters.gpu_seconds / 3600.0,
            cost_usd=counters.cost_usd,
            evictions=counters.evictions,
            evictions_refused=self.eviction.refused,
            rejected_at_zero=self.rejected_at_zero,
            events=self.options.events,
            capacity={n: f.params for n, f in self.fleets.items()},
            workloads={w.name: w.kind for w in self.scenario.workloads},
            log=world.log,
            spot_grace=self._spot_grace(),
        )

    def _spot_grace(self) -> list[tuple[str, float, float]]:
        """(workload, grace, shutdown share) for serving workloads that can land on spot."""
        out = []
        scheduler = self.world.scheduler
        for w in self.scenario.workloads:
            if w.serving is None:
                continue
            probe = Pod("probe", w.name, 0, w.template, 0.0)
            for pool in self.cluster.spec.node_pools:
                if not pool.spot:
                    continue
                node = Node(
                    "probe",
                    pool,
                    dict(pool.labels),
                    tuple(pool.taints),
                    amounts(pool.allocatable),
                    0.0,
                    0.0,
                )
                fits = not any(
                    r.startswith(("node(s) had untolerated", "node(s) didn't match Pod's"))
                    for r in scheduler.reasons(probe, node, [])
                )
                shutdown = (
                    pool.reclaim_notice_seconds
                    if pool.pod_shutdown_seconds is None
                    else pool.pod_shutdown_seconds
                )
                if fits:
                    out.append((w.name, w.template.grace_s, shutdown))
                    break
        return out
