"""Where GPU pods may land: a toleration for the GPU taint *and* a node selector on a real
label (a toleration only permits, it never attracts), capacity-type preferences, and spread
across nodes and zones."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import ModelServiceSpec
from podserve.kube import conventions as c
from podserve.kube.capacity import SpotPool


def gpu_tolerations(spec: ModelServiceSpec) -> list[dict[str, Any]]:
    if spec.gpu.count == 0:
        return []
    return [{"key": spec.gpu.taint_key, "operator": "Exists", "effect": "NoSchedule"}]


def spot_tolerations(pool: SpotPool) -> list[dict[str, Any]]:
    if pool.taint_key is None:
        return []
    return [
        {"key": pool.taint_key, "operator": "Equal", "value": pool.value, "effect": "NoSchedule"}
    ]


def node_selector(spec: ModelServiceSpec) -> dict[str, str]:
    gpu = spec.gpu
    if gpu.count == 0:
        return {}
    selector = {gpu.product_label: gpu.product} if gpu.product else {gpu.present_label: "true"}
    if gpu.time_slicing:
        # GPU feature discovery labels time-sliced nodes; an unshared node must not take
        # a pod sized for a slice, nor the reverse.
        selector["nvidia.com/gpu.sharing-strategy"] = "time-slicing"
    return dict(sorted(selector.items()))


def capacity_affinity(pool: SpotPool, *, prefer_spot: bool) -> dict[str, Any]:
    """Preferred node affinity: serving leans to on-demand (NotIn also matches nodes that
    carry no capacity label at all), batch leans to spot."""
    operator = "In" if prefer_spot else "NotIn"
    return {
        "nodeAffinity": {
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
        },
    }


def spread_constraints(spec: ModelServiceSpec, selector: dict[str, str]) -> list[dict[str, Any]]:
    when = "DoNotSchedule" if spec.spread.hard else "ScheduleAnyway"
    keys = []
    if spec.spread.nodes:
        keys.append(c.HOSTNAME_KEY)
    if spec.spread.zones:
        keys.append(c.ZONE_KEY)
    return [
        {
            "maxSkew": 1,
            "topologyKey": key,
            "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": dict(selector)},
        }
        for key in keys
    ]
