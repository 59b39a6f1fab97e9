"""Deployment fenceposts and rolling steps (https://kubernetes.io/docs/concepts/workloads/
controllers/deployment/, deployment_util.go ResolveFenceposts, rolling.go), StatefulSet
ordering, and PodDisruptionBudget arithmetic (https://kubernetes.io/docs/tasks/run-application/
configure-pdb/, disruption.go)."""

from __future__ import annotations

import pytest

from podserve.kube.simulate.objects import Pdb
from podserve.kube.simulate.pdb import eviction_allowed, status
from podserve.kube.simulate.rollout import (
    OrdinalPod,
    ReplicaSet,
    fenceposts,
    recreate_sync,
    rolling_sync,
    statefulset_sync,
)


@pytest.mark.parametrize(
    ("surge", "unavailable", "replicas", "expected"),
    [
        ("25%", "25%", 10, (3, 2)),  # surge rounds up (2.5 → 3), unavailable down (2.5 → 2)
        ("25%", "25%", 3, (1, 0)),  # the doc's 3 replicas: at most 4, at least 3 available
        ("25%", "25%", 4, (1, 1)),
        (0, "10%", 3, (0, 1)),  # both resolve to 0: unavailable becomes 1
        (1, 0, 2, (1, 0)),
        (0, 5, 3, (0, 3)),  # capped at replicas
        ("25%", "25%", 0, (0, 0)),
    ],
)
def test_fenceposts(
    surge: int | str, unavailable: int | str, replicas: int, expected: tuple[int, int]
) -> None:
    assert fenceposts(surge, unavailable, replicas) == expected


def test_rolling_surge_one_unavailable_zero_moves_one_pod_at_a_time() -> None:
    new, old = ReplicaSet(1, 0), ReplicaSet(0, 3, available=3)
    assert rolling_sync(3, 1, 0, new, [old])
    assert (new.replicas, old.replicas) == (1, 3)
    # The new pod is not available yet: the old ReplicaSet must keep all 3.
    assert not rolling_sync(3, 1, 0, new, [old])
    new.available = 1
    assert rolling_sync(3, 1, 0, new, [old])
    assert old.replicas == 2
    assert rolling_sync(3, 1, 0, new, [old])
    assert new.replicas == 2
    assert not rolling_sync(3, 1, 0, new, [old])  # waits for the second new pod
    new.available = 2
    old.available = 2
    assert rolling_sync(3, 1, 0, new, [old])
    assert old.replicas == 1


def test_rolling_surge_zero_unavailable_one_deletes_first() -> None:
    new, old = ReplicaSet(1, 0), ReplicaSet(0, 2, available=2)
    assert rolling_sync(2, 0, 1, new, [old])
    assert (new.replicas, old.replicas) == (0, 1)  # no room to surge: scale old down first
    assert rolling_sync(2, 0, 1, new, [old])
    assert new.replicas == 1


def test_rolling_cleans_unhealthy_old_pods_first() -> None:
    new, old = ReplicaSet(1, 1, available=0), ReplicaSet(0, 3, available=1)
    # maxScaledDown = 4 - (3 - 1) - 1 = 1: one unhealthy old pod goes.
    assert rolling_sync(3, 1, 1, new, [old])
    assert old.replicas == 2


def test_recreate_waits_for_old_pods_to_be_gone() -> None:
    new, old = ReplicaSet(1, 0), ReplicaSet(0, 2)
    assert recreate_sync(2, new, [old], old_pods_running=True)
    assert old.replicas == 0
    assert not recreate_sync(2, new, [old], old_pods_running=True)
    assert new.replicas == 0
    assert recreate_sync(2, new, [old], old_pods_running=False)
    assert new.replicas == 2


def test_statefulset_ordered_ready_creates_one_at_a_time() -> None:
    assert statefulset_sync(3, [], 0, parallel=False).create == (0,)
    pods = [OrdinalPod(0, 0, healthy=False, terminating=False)]
    assert statefulset_sync(3, pods, 0, parallel=False).create == ()
    pods = [OrdinalPod(0, 0, healthy=True, terminating=False)]
    assert statefulset_sync(3, pods, 0, parallel=False).create == (1,)
    assert statefulset_sync(3, [], 0, parallel=True).create == (0, 1, 2)


def test_statefulset_rolling_update_from_the_highest_ordinal_waiting_for_health() -> None:
    pods = [OrdinalPod(i, 0, healthy=True, terminating=False) for i in range(3)]
    assert statefulset_sync(3, pods, 1, parallel=True).delete == (2,)
    pods[2] = OrdinalPod(2, 1, healthy=False, terminating=False)
    assert statefulset_sync(3, pods, 1, parallel=True).delete == ()  # waits for 2 to be Ready
    pods[2] = OrdinalPod(2, 1, healthy=True, terminating=False)
    assert statefulset_sync(3, pods, 1, parallel=True).delete == (1,)


def _pdb(**kw: object) -> Pdb:
    return Pdb("p", (("app", "x"),), kw.get("min_available"), kw.get("max_unavailable"))  # type: ignore[arg-type]


def test_pdb_doc_examples() -> None:
    # minAvailable 2 with 3 healthy replicas: one voluntary disruption allowed.
    state = status(_pdb(min_available=2), matching_pods=3, healthy=3, controller_scale=3)
    assert (state.desired_healthy, state.disruptions_allowed) == (2, 1)
    # maxUnavailable 1 with 3 replicas: desired healthy 2.
    state = status(_pdb(max_unavailable=1), matching_pods=3, healthy=3, controller_scale=3)
    assert (state.expected_pods, state.desired_healthy, state.disruptions_allowed) == (3, 2, 1)
    # "minAvailable 50%" with 7 pods rounds up to 4.
    state = status(_pdb(min_available="50%"), matching_pods=7, healthy=7, controller_scale=7)
    assert state.desired_healthy == 4
    assert state.disruptions_allowed == 3
    # maxUnavailable 30% of 10 rounds up to 3: desired 7.
    state = status(_pdb(max_unavailable="30%"), matching_pods=10, healthy=10, controller_scale=10)
    assert state.desired_healthy == 7
    # With one pod down, minAvailable 2 of 3 allows nothing: the Eviction API answers 429.
    pdb = _pdb(min_available=2)
    state = status(pdb, matching_pods=3, healthy=2, controller_scale=3)
    assert state.disruptions_allowed == 0
    assert not eviction_allowed(pdb, state, pod_healthy=True)
    # An unhealthy pod may go when the budget is met (IfHealthyBudget) ...
    assert eviction_allowed(pdb, state, pod_healthy=False)
    state = status(pdb, matching_pods=3, healthy=1, controller_scale=3)
    assert not eviction_allowed(pdb, state, pod_healthy=False)
    # ... and always with AlwaysAllow.
    always = Pdb("p", (("app", "x"),), 2, None, always_allow_unhealthy=True)
    assert eviction_allowed(always, state, pod_healthy=False)
