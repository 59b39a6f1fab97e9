"""PodDisruptionBudget status and the Eviction API's verdict.

`disruptionsAllowed = max(0, currentHealthy - desiredHealthy)`, with the expected count
from the owning controllers' scale for `maxUnavailable` and percentage `minAvailable`, and
from the matching pods for an integer `minAvailable` (kubernetes/kubernetes
pkg/controller/disruption/disruption.go getExpectedPodCount, updatePdbStatus). Only the
Eviction API checks budgets: 429 "Cannot evict pod as it would violate the pod's disruption
budget." (pkg/registry/core/pod/storage/eviction.go); deletes and rollouts ignore them.
Examples from https://kubernetes.io/docs/tasks/run-application/configure-pdb/ are tests."""

from __future__ import annotations

import math
from dataclasses import dataclass

from podserve.kube.simulate.objects import Pdb

TOO_MANY_REQUESTS = 429
VIOLATION = "Cannot evict pod as it would violate the pod's disruption budget."


@dataclass(frozen=True, slots=True)
class PdbStatus:
    expected_pods: int
    current_healthy: int
    desired_healthy: int
    disruptions_allowed: int


def _scaled(value: int | str, total: int) -> int:
    """intstr.GetScaledValueFromIntOrPercent with roundUp=true (the PDB rounds up)."""
    if isinstance(value, str):
        return math.ceil(int(value.rstrip("%")) * total / 100)
    return value


def status(pdb: Pdb, matching_pods: int, healthy: int, controller_scale: int) -> PdbStatus:
    """`matching_pods`: pods the selector matches that are not terminal; `healthy`: those
    Ready and not being deleted; `controller_scale`: Σ spec.replicas of their owners."""
    if pdb.max_unavailable is not None:
        expected = controller_scale
        desired = max(0, expected - _scaled(pdb.max_unavailable, expected))
    elif isinstance(pdb.min_available, str):
        expected = controller_scale
        desired = _scaled(pdb.min_available, expected)
    else:
        expected = matching_pods
        desired = pdb.min_available or 0
    return PdbStatus(expected, healthy, desired, max(0, healthy - desired))


def eviction_allowed(pdb: Pdb, state: PdbStatus, pod_healthy: bool) -> bool:
    """Whether the Eviction API lets one matching pod go (else 429). A pod that is not
    healthy may go when the policy is AlwaysAllow, or (IfHealthyBudget, the default) when
    the budget is currently met."""
    if not pod_healthy:
        if pdb.always_allow_unhealthy:
            return True
        return state.current_healthy >= state.desired_healthy
    return state.disruptions_allowed > 0
