"""Resource amounts as integers, the way the scheduler's `framework.Resource` holds them:
CPU in millicores, memory and storage in bytes, extended resources (`nvidia.com/gpu`,
`nvidia.com/mig-1g.10gb`) as whole counts (kubernetes/kubernetes
pkg/scheduler/framework/types.go `Resource`, `NewResource`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from podserve.config.service_base import quantity_value

Amounts = dict[str, int]

CPU = "cpu"
MEMORY = "memory"
PODS = "pods"
GPU = "nvidia.com/gpu"
# Resource names the cluster autoscaler and `gpu_hours` treat as accelerators: whole GPUs,
# MIG slices (mixed strategy) and shared replicas (k8s-device-plugin README, "MIG support").
GPU_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-")


def amount(name: str, quantity: str | int | float) -> int:
    """One quantity as the integer the scheduler compares (millicores for cpu)."""
    value = quantity_value(str(quantity))
    if name == CPU:
        return math.ceil(value * 1000)
    return math.ceil(value)


def amounts(values: Mapping[str, str | int | float] | None) -> Amounts:
    return {name: amount(name, q) for name, q in (values or {}).items()}


def is_gpu(name: str) -> bool:
    return name.startswith(GPU_PREFIXES)


def gpu_count(values: Mapping[str, int]) -> int:
    return sum(v for k, v in values.items() if is_gpu(k))


def add(into: Amounts, other: Mapping[str, int], sign: int = 1) -> None:
    for name, value in other.items():
        into[name] = into.get(name, 0) + sign * value


def insufficient(request: Mapping[str, int], free: Mapping[str, int]) -> list[str]:
    """Resource names the request does not fit, in the scheduler's order (cpu, memory, then
    the rest by name; pkg/scheduler/framework/plugins/noderesources/fit.go
    `fitsRequest`)."""
    missing = [name for name, value in request.items() if value > 0 and value > free.get(name, 0)]
    order = {CPU: 0, MEMORY: 1, PODS: 2}
    return sorted(missing, key=lambda n: (order.get(n, 3), n))
