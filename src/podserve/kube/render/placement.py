"""Where GPU pods may land: a toleration for the GPU taint *and* a node selector on a label
the provider really writes (a toleration only permits, it never attracts; the labels per
provider are in `podserve.kube.accelerators`), capacity-type preferences, and spread across
nodes and zones."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import ModelServiceSpec
from podserve.kube import conventions as c
from podserve.kube.accelerators import gpu_placement
from podserve.kube.capacity import SpotPool


def gpu_tolerations(spec: ModelServiceSpec) -> list[dict[str, Any]]:
    placed = gpu_placement(spec)
    return [dict(t) for t in placed.tolerations] if placed else []


def spot_tolerations(pool: SpotPool | None) -> list[dict[str, Any]]:
    if pool is None or pool.taint_key is None:
        return []
    return [
        {"key": pool.taint_key, "operator": "Equal", "value": pool.value, "effect": "NoSchedule"}
    ]


def node_selector(spec: ModelServiceSpec) -> dict[str, str]:
    placed = gpu_placement(spec)
    return dict(placed.node_selector) if placed else {}


def gpu_affinity(spec: ModelServiceSpec) -> dict[str, Any] | None:
    """Required node affinity for labels that must exist whatever their value (GKE's
    accelerator label when no product is named); nodeSelector cannot say "exists"."""
    placed = gpu_placement(spec)
    if placed is None or not placed.exists:
        return None
    expressions = [{"key": key, "operator": "Exists"} for key in placed.exists]
    return {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": expressions}]
        }
    }


def capacity_affinity(pool: SpotPool | None, *, prefer_spot: bool) -> dict[str, Any] | None:
    """Preferred node affinity: serving leans to on-demand (NotIn also matches nodes that
    carry no capacity label at all), batch leans to spot."""
    if pool is None:
        return None
    operator = "In" if prefer_spot else "NotIn"
    return {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "preference": {
                    "matchExpressions": [
                        {"key": pool.label, "operator": operator, "values": [pool.value]},
                    ]
                },
            }
        ],
    }


def node_affinity(
    spec: ModelServiceSpec, pool: SpotPool | None, *, prefer_spot: bool | None
) -> dict[str, Any] | None:
    """The pod's `affinity`: required GPU labels and/or a capacity-type preference
    (prefer_spot None: no preference, the pod may run on spot and on-demand alike)."""
    node: dict[str, Any] = {}
    required = gpu_affinity(spec)
    if required:
        node.update(required)
    if prefer_spot is not None:
        preferred = capacity_affinity(pool, prefer_spot=prefer_spot)
        if preferred:
            node.update(preferred)
    return {"nodeAffinity": node} if node else None


def hard_spread(spec: ModelServiceSpec, floor: int) -> bool:
    """Required spread by default once a workload keeps two replicas: with ScheduleAnyway
    the scheduler may still pack them on one node, and one node event is then an outage."""
    return spec.spread.hard if spec.spread.hard is not None else floor >= 2


def spread_constraints(
    spec: ModelServiceSpec, selector: dict[str, str], *, floor: int, kind: str | None = None
) -> list[dict[str, Any]]:
    hard = hard_spread(spec, floor)
    keys = []
    if spec.spread.nodes:
        keys.append(c.HOSTNAME_KEY)
    if spec.spread.zones:
        keys.append(c.ZONE_KEY)
    result = []
    for key in keys:
        constraint: dict[str, Any] = {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
            "labelSelector": {"matchLabels": dict(selector)},
        }
        if hard:
            # Count only pods of the same revision: during a rollout the old pods would
            # otherwise hold the skew and leave new ones Pending (KEP-3243, beta and on by
            # default since 1.27). Deployments label pods with pod-template-hash;
            # StatefulSets with controller-revision-hash.
            workload = kind or spec.workload
            revision = (
                "controller-revision-hash" if workload == "StatefulSet" else "pod-template-hash"
            )
            constraint["matchLabelKeys"] = [revision]
        result.append(constraint)
    return result
