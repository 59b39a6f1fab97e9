"""Deployment and StatefulSet rollouts as pure decisions over replica counts.

Deployment (kubernetes/kubernetes pkg/controller/deployment): `ResolveFenceposts` in
util/deployment_util.go — maxSurge rounds **up**, maxUnavailable rounds **down**, both 0
becomes unavailable 1, and unavailable is capped at replicas; `rolling.go`
reconcileNewReplicaSet (NewRSNewReplicas: total spec ≤ replicas + surge) then, only if the new
ReplicaSet did not scale, reconcileOldReplicaSets (cleanupUnhealthyReplicas, then scale old
ReplicaSets down while available > replicas - maxUnavailable); `recreate.go` (old to 0, wait
until no old pod runs, then the new one to replicas). Fenceposts from
https://kubernetes.io/docs/concepts/workloads/controllers/deployment/ are tests.

StatefulSet (pkg/controller/statefulset/stateful_set_control.go): OrderedReady creates one
ordinal at a time after the lower ones are Running and Ready, Parallel creates them all;
RollingUpdate walks from the highest ordinal down, deleting one outdated pod and waiting until
its replacement is Running and Ready before the next."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


def scaled(value: int | str, total: int, round_up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    fraction = int(value.rstrip("%")) * total / 100
    return math.ceil(fraction) if round_up else math.floor(fraction)


def fenceposts(max_surge: int | str, max_unavailable: int | str, replicas: int) -> tuple[int, int]:
    """(maxSurge, MaxUnavailable) as the controller uses them."""
    surge = scaled(max_surge, replicas, True)
    unavailable = scaled(max_unavailable, replicas, False)
    if surge == 0 and unavailable == 0:
        # Rounding down can make both zero; the controller then allows one unavailable.
        unavailable = 1
    if replicas == 0:
        unavailable = 0
    return surge, min(unavailable, replicas)


@dataclass(slots=True)
class ReplicaSet:
    revision: int
    replicas: int  # spec.replicas
    available: int = 0  # status.availableReplicas (Ready ≥ minReadySeconds, not deleting)


def rolling_sync(
    replicas: int,
    max_surge: int | str,
    max_unavailable: int | str,
    new: ReplicaSet,
    olds: Sequence[ReplicaSet],
) -> bool:
    """One rolling sync; `olds` oldest first. Mutates spec replicas; True if anything
    scaled."""
    surge, unavailable = fenceposts(max_surge, max_unavailable, replicas)
    # reconcileNewReplicaSet
    if new.replicas > replicas:
        new.replicas = replicas
        return True
    if new.replicas < replicas:
        current = new.replicas + sum(rs.replicas for rs in olds)
        total = replicas + surge
        if current < total:
            new.replicas += min(total - current, replicas - new.replicas)
            return True
    # reconcileOldReplicaSets
    old_count = sum(rs.replicas for rs in olds)
    if old_count == 0:
        return False
    all_count = old_count + new.replicas
    min_available = replicas - unavailable
    new_unavailable = new.replicas - new.available
    max_scaled_down = all_count - min_available - new_unavailable
    if max_scaled_down <= 0:
        return False
    cleaned = 0
    for rs in olds:  # cleanupUnhealthyReplicas
        if cleaned >= max_scaled_down:
            break
        unhealthy = rs.replicas - rs.available
        if unhealthy <= 0:
            continue
        step = min(max_scaled_down - cleaned, unhealthy)
        rs.replicas -= step
        cleaned += step
    available = new.available + sum(min(rs.available, rs.replicas) for rs in olds)
    scaled_down = 0
    if available > min_available:  # scaleDownOldReplicaSetsForRollingUpdate
        budget = available - min_available
        for rs in olds:
            if scaled_down >= budget:
                break
            step = min(rs.replicas, budget - scaled_down)
            rs.replicas -= step
            scaled_down += step
    return cleaned + scaled_down > 0


def recreate_sync(
    replicas: int, new: ReplicaSet, olds: Sequence[ReplicaSet], old_pods_running: bool
) -> bool:
    changed = False
    for rs in olds:
        if rs.replicas:
            rs.replicas = 0
            changed = True
    if old_pods_running or changed:
        return changed
    if new.replicas != replicas:
        new.replicas = replicas
        return True
    return False


def scale_sync(replicas: int, new: ReplicaSet, olds: Sequence[ReplicaSet]) -> bool:
    """A scale change (the HPA's) with no rollout in progress: the one active ReplicaSet
    takes the new count (deployment/sync.go scale)."""
    if any(rs.replicas for rs in olds) or new.replicas == replicas:
        return False
    new.replicas = replicas
    return True


@dataclass(frozen=True, slots=True)
class OrdinalPod:
    ordinal: int
    revision: int
    healthy: bool  # Running and Ready
    terminating: bool


@dataclass(frozen=True, slots=True)
class StatefulActions:
    create: tuple[int, ...]  # ordinals to create (at the update revision)
    delete: tuple[int, ...]  # ordinals to delete


def statefulset_sync(
    replicas: int,
    pods: Sequence[OrdinalPod],
    update_revision: int,
    parallel: bool,
    rolling: bool = True,
) -> StatefulActions:
    by_ordinal = {p.ordinal: p for p in pods}
    create: list[int] = []
    delete: list[int] = []
    for ordinal in range(replicas):
        if ordinal in by_ordinal:
            continue
        if not parallel and any(
            not by_ordinal[o].healthy for o in range(ordinal) if o in by_ordinal
        ):
            break
        if not parallel and any(o not in by_ordinal for o in range(ordinal)):
            break
        create.append(ordinal)
        if not parallel:
            break
    extra = sorted((o for o in by_ordinal if o >= replicas), reverse=True)
    for ordinal in extra:
        if by_ordinal[ordinal].terminating:
            if not parallel:
                break
            continue
        if not parallel and any(not p.healthy for p in pods if p.ordinal < replicas):
            break
        delete.append(ordinal)
        if not parallel:
            break
    if rolling and not create and not delete:
        for ordinal in sorted((o for o in by_ordinal if o < replicas), reverse=True):
            pod = by_ordinal[ordinal]
            if pod.revision != update_revision and not pod.terminating:
                delete.append(ordinal)
                break
            if not pod.healthy:
                break
    return StatefulActions(tuple(create), tuple(delete))
