"""The Eviction API over the simulated pods: PodDisruptionBudget status from the live pods and
controllers (pdb.py has the arithmetic), 429 when a budget is spent, and `kubectl drain`'s loop
(cordon, evict each pod, retry refused ones every 5 s; kubectl/pkg/drain/drain.go)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from podserve.kube.simulate.controllers import WorkloadController
from podserve.kube.simulate.manifests import matches
from podserve.kube.simulate.objects import Pdb
from podserve.kube.simulate.pdb import PdbStatus, eviction_allowed, status
from podserve.kube.simulate.state import Node, Phase, Pod
from podserve.kube.simulate.world import World

DRAIN_RETRY_S = 5.0


class EvictionApi:
    def __init__(
        self, world: World, controllers: Mapping[str, WorkloadController], pdbs: Sequence[Pdb]
    ) -> None:
        self.world = world
        self.controllers = controllers
        self.pdbs = pdbs
        self.refused: list[tuple[float, str, str]] = []  # (t, pod, pdb)

    def status(self, pdb: Pdb) -> PdbStatus:
        pods = [
            p
            for owner in self.world.pods.values()
            for p in owner
            if matches(pdb.selector, p.template.labels)
        ]
        healthy = sum(1 for p in pods if p.phase is Phase.READY)
        scale = sum(
            c.replicas
            for c in self.controllers.values()
            if matches(pdb.selector, c.workload.template.labels)
        )
        return status(pdb, len(pods), healthy, scale)

    def evict(self, pod: Pod, now: float, dry_run: bool = False) -> bool:
        """POST pods/eviction: False (429) when a matching budget has no disruption left."""
        if pod.phase >= Phase.TERMINATING:
            return True
        for pdb in self.pdbs:
            if matches(pdb.selector, pod.template.labels):
                state = self.status(pdb)
                if not eviction_allowed(pdb, state, pod.phase is Phase.READY):
                    if not dry_run:
                        self.refused.append((now, pod.name, pdb.name))
                    return False
        if not dry_run:
            self.world.counters.evictions += 1
            self.world.delete(pod, now, cause="evicted")
        return True

    def drain(self, node: Node, now: float) -> None:
        """Cordon, evict what is left, and come back in 5 s for the refused pods."""
        node.cordoned = True
        self.world.dirty_schedule = True
        left = [p for p in node.pods if p.phase < Phase.TERMINATING]
        refused = [p for p in left if not self.evict(p, now)]
        if refused:
            self.world.push(now + DRAIN_RETRY_S, "drain-retry", node)
