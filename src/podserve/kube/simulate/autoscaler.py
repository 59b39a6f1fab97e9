"""Cluster Autoscaler on the virtual clock (kubernetes/autoscaler cluster-autoscaler/FAQ.md,
core/static_autoscaler.go):

- every `scan-interval` (10 s) pods the scheduler marked unschedulable, and not already
  expected to fit on nodes being provisioned, are placed on the template node of each pool
  that can still grow; the expander picks one (least-waste of cpu and memory, or price) and
  the node registers after the pool's `provisioningSeconds`;
- pods below the expendable cutoff (priority < -10, `--expendable-pods-priority-cutoff`)
  never trigger a scale-up;
- a node whose requested share (GPU nodes: GPU requests only) is under the threshold (0.5)
  and whose pods fit elsewhere is unneeded; after `scale-down-unneeded-time` (10 min), and
  not within `scale-down-delay-after-add` (10 min) of a scale-up, its pods are evicted through
  the Eviction API (a PodDisruptionBudget can refuse) and the node is deleted; empty nodes go
  up to 10 per scan (`--max-empty-bulk-delete`), others one at a time."""

from __future__ import annotations

from collections.abc import Callable

from podserve.kube.simulate.cluster import Autoscaler, NodePool
from podserve.kube.simulate.resources import CPU, MEMORY, PODS, amounts, is_gpu
from podserve.kube.simulate.state import Node, Phase, Pod
from podserve.kube.simulate.world import World

EXPENDABLE_CUTOFF = -10
MAX_EMPTY_BULK_DELETE = 10
MAX_GRACEFUL_TERMINATION_S = 600.0

# (pod, now, dry_run) → whether the Eviction API allows it (and, unless dry_run, evicts).
Evict = Callable[[Pod, float, bool], bool]


def utilization(node: Node) -> float:
    """Requested share: GPUs for GPU nodes, else the larger of cpu and memory
    (simulator/utilization/info.go Calculate)."""
    gpus = [k for k in node.allocatable if is_gpu(k) and node.allocatable[k] > 0]
    names = gpus or [CPU, MEMORY]
    shares = [node.used.get(n, 0) / node.allocatable[n] for n in names if node.allocatable.get(n)]
    return max(shares, default=0.0)


class ClusterAutoscaler:
    def __init__(self, settings: Autoscaler, pools: list[NodePool], world: World) -> None:
        self.settings = settings
        self.pools = pools
        self.world = world
        self.next_scan_t = 0.0
        self.last_scale_up_t = -1e18
        self.scale_ups: list[tuple[float, str, str]] = []  # (t, pool, node)
        self.scale_downs: list[tuple[float, str]] = []
        self.blocked: list[tuple[float, str]] = []  # scale-downs a PDB refused
        self._seen_version = -1
        self._template_cache: dict[str, Node] = {}

    def _template(self, pool: NodePool) -> Node:
        node = self._template_cache.get(pool.name)
        if node is None:
            allocatable = amounts(pool.allocatable)
            allocatable.setdefault(PODS, 110)
            labels = {
                **pool.labels,
                "kubernetes.io/hostname": f"{pool.name}-template",
                "podserve.dev/node-pool": pool.name,
            }
            if pool.zones:
                labels["topology.kubernetes.io/zone"] = pool.zones[0]
            node = Node(
                f"{pool.name}-template", pool, labels, tuple(pool.taints), allocatable, 0.0, 0.0
            )
            self._template_cache[pool.name] = node
        return node

    def scan(self, now: float, evict: Evict) -> None:
        self.next_scan_t = now + self.settings.scan_interval_seconds
        if self._scale_up(now):
            return
        self._scale_down(now, evict)

    # -- scale-up -------------------------------------------------------------------------
    def _scale_up(self, now: float) -> bool:
        world = self.world
        waiting = [
            p
            for p in world.pending
            if p.reason and p.nominated is None and p.template.priority >= EXPENDABLE_CUTOFF
        ]
        if not waiting:
            return False
        # Room left on nodes already coming up (they are counted, so no double scale-up).
        upcoming = [(n, n.free()) for n in world.provisioning if n.removed_t is None]
        added = False
        for pod in sorted(waiting, key=lambda p: (-p.template.priority, p.created_t)):
            if any(self._fits(pod, node, free) for node, free in upcoming):
                continue
            options = [
                pool
                for pool in self.pools
                if world.pool_size(pool.name) < pool.max_nodes
                and not self.world.scheduler.reasons(pod, self._template(pool), [])
            ]
            if not options:
                continue
            pool = min(options, key=lambda p: (self._waste(p, pod), p.price_per_hour_usd, p.name))
            if self.settings.expander == "price":
                pool = min(options, key=lambda p: (p.price_per_hour_usd, p.name))
            node = world.add_node(pool, now, now + pool.provisioning_seconds)
            free = node.free()
            self._fits(pod, node, free)
            upcoming.append((node, free))
            self.scale_ups.append((now, pool.name, node.name))
            world.log.append((now, f"cluster-autoscaler: scale-up {pool.name} for {pod.name}"))
            added = True
        if added:
            self.last_scale_up_t = now
        return added

    @staticmethod
    def _fits(pod: Pod, node: Node, free: dict[str, int]) -> bool:
        requests = pod.template.requests
        if any(v > free.get(k, 0) for k, v in requests.items() if v > 0):
            return False
        if not all(node.labels.get(k) == v for k, v in pod.template.node_selector.items()):
            return False
        for k, v in requests.items():
            free[k] = free.get(k, 0) - v
        return True

    def _waste(self, pool: NodePool, pod: Pod) -> float:
        """least-waste: the unused share of cpu and memory once the pod is placed."""
        node = self._template(pool)
        waste = 0.0
        for name in (CPU, MEMORY):
            total = node.allocatable.get(name, 0)
            if total:
                waste += (total - pod.template.requests.get(name, 0)) / total
        return waste

    # -- scale-down -----------------------------------------------------------------------
    def _scale_down(self, now: float, evict: Evict) -> None:
        world = self.world
        if world.version != self._seen_version:
            self._seen_version = world.version
            self._mark_unneeded(now)
        if now - self.last_scale_up_t < self.settings.scale_down_delay_after_add_seconds:
            return
        due = [
            n
            for n in world.nodes
            if n.unneeded_since is not None
            and now - n.unneeded_since >= self.settings.scale_down_unneeded_seconds
            and n.removed_t is None
        ]
        empty = [n for n in due if not n.pods][:MAX_EMPTY_BULK_DELETE]
        busy = [n for n in due if n.pods][:1]
        for node in empty + busy:
            if world.pool_size(node.pool.name) <= node.pool.min_nodes:
                continue
            if node.pods and not self._drain(node, now, evict):
                continue
            self.scale_downs.append((now, node.name))
            world.log.append((now, f"cluster-autoscaler: scale-down {node.name}"))
            node.cordoned = True
            node.removed_t = now
            if node.pods:
                last = max((p.kill_t or now) for p in node.pods)
                world.push(min(last, now + MAX_GRACEFUL_TERMINATION_S), "node-gone", node)
            else:
                world.remove_node(node, now)

    def _mark_unneeded(self, now: float) -> None:
        world = self.world
        shrinkable = {
            pool.name for pool in self.pools if world.pool_size(pool.name) > pool.min_nodes
        }
        for node in world.nodes:
            if node.pool.name not in shrinkable or node.cordoned:
                node.unneeded_since = None
                continue
            if utilization(node) < self.settings.scale_down_utilization_threshold and (
                self._movable(node)
            ):
                if node.unneeded_since is None:
                    node.unneeded_since = now
            else:
                node.unneeded_since = None

    def _movable(self, node: Node) -> bool:
        if not node.pods:
            return True
        others = [n for n in self.world.nodes if n is not node and not n.cordoned]
        for pod in node.pods:
            if pod.phase >= Phase.TERMINATING:
                continue
            if not any(not self.world.scheduler.reasons(pod, n, others) for n in others):
                return False
        return True

    def _drain(self, node: Node, now: float, evict: Evict) -> bool:
        """Check every pod's eviction first; then evict them one by one. A refusal midway
        (the first eviction used the budget) fails the scale-down and the node stays, as
        the autoscaler's drain gives up and removes its deletion taint (core/scaledown/
        actuation/drain.go)."""
        movable = [p for p in node.pods if p.phase < Phase.TERMINATING]
        if not all(evict(pod, now, True) for pod in movable):
            self.blocked.append((now, node.name))
            return False
        for pod in movable:
            if not evict(pod, now, False):
                self.blocked.append((now, node.name))
                return False
        return True
