"""The numbers a ModelService implies, computed once so that probes, grace period, drain
timeout, memory and autoscaler windows all follow from the same inputs: probe budgets
(https://kubernetes.io/docs/concepts/configuration/liveness-readiness-startup-probes/), pod
termination (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/#pod-termination)
and HPA behavior (https://kubernetes.io/docs/tasks/run-application/horizontal-pod-autoscale/)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal

from podserve.config.model_service import (
    ModelServiceSpec,
    ScalingMetric,
    quantity_value,
)
from podserve.kube.capacity import SpotPool, spot_pool

STARTUP_PERIOD_S = 10
STARTUP_BUDGET_FACTOR = 1.5
LIVENESS_PERIOD_S = 20
LIVENESS_FAILURES = 3
READINESS_PERIOD_S = 5
READINESS_FAILURES = 2
MIN_SCALE_DOWN_WINDOW_S = 600
MAX_SCALE_DOWN_WINDOW_S = 3600  # the API rejects windows above an hour (§1.1)
# A GPU node takes minutes to arrive (CA scan + provider boot + driver; providers.md §5):
# a queue spike shorter than this must not buy nodes that arrive after it.
GPU_SCALE_UP_WINDOW_S = 60
FALLBACK_FAILURES = 3
HOSTPATH_CACHE_CAP = "100Gi"
_MI = Decimal(2) ** 20
_GI = Decimal(2) ** 30


@dataclass(frozen=True, slots=True)
class Plan:
    pre_stop_s: int
    drain_timeout_s: int
    grace_period_s: int
    memory: str  # request = limit: process memory + /dev/shm
    cpu_request: str
    cpu_limit: str
    shm: str
    max_surge: int
    max_unavailable: int
    spare_gpu: bool
    scale_down_window_s: int
    scale_up_window_s: int
    spot: SpotPool | None
    cache_max_bytes: int | None
    warnings: tuple[str, ...]


def startup_failure_threshold(load_seconds: float) -> int:
    """failureThreshold so that threshold x period ≥ 1.5 x the observed load time."""
    return max(1, math.ceil(load_seconds * STARTUP_BUDGET_FACTOR / STARTUP_PERIOD_S))


def format_bytes(value: Decimal) -> str:
    if value % _GI == 0:
        return f"{int(value / _GI)}Gi"
    return f"{math.ceil(value / _MI)}Mi"


def format_cpu(value: Decimal) -> str:
    millis = math.ceil(value * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def scale_down_window(spec: ModelServiceSpec) -> int:
    chosen = spec.autoscaling.scale_down_stabilization_seconds if spec.autoscaling else None
    if chosen is not None:
        return chosen
    # Longer than a load: removing a replica that takes minutes to come back must wait out
    # at least that long a lull.
    wanted = max(MIN_SCALE_DOWN_WINDOW_S, math.ceil(2 * spec.model.load_seconds))
    return min(MAX_SCALE_DOWN_WINDOW_S, wanted)


def scale_up_window(spec: ModelServiceSpec) -> int:
    chosen = spec.autoscaling.scale_up_stabilization_seconds if spec.autoscaling else None
    if chosen is not None:
        return chosen
    return GPU_SCALE_UP_WINDOW_S if spec.gpu.count else 0


def cache_cap_bytes(spec: ModelServiceSpec) -> int | None:
    """The `--cache-max-bytes` given to the fetch: what the volume can hold."""
    cache = spec.cache
    cap = cache.max_size or cache.size
    if cap is None and cache.kind == "hostPath":
        cap = HOSTPATH_CACHE_CAP
    return int(quantity_value(cap)) if cap is not None else None


def fallback_replicas(spec: ModelServiceSpec) -> int:
    scaling = spec.autoscaling
    if scaling is not None and scaling.fallback_replicas is not None:
        return scaling.fallback_replicas
    # One above the floor: a blind service should not sit at its minimum, nor jump to max.
    return min(spec.replicas.max, max(1, spec.replicas.min + 1))


def make_plan(spec: ModelServiceSpec) -> Plan:
    warnings: list[str] = []
    pre_stop = spec.timing.pre_stop_seconds
    drain = math.ceil(spec.serving.longest_request_seconds)
    grace = pre_stop + drain + spec.timing.margin_seconds
    memory = quantity_value(spec.resources.memory) + quantity_value(spec.resources.shm)
    cpu = quantity_value(spec.resources.cpu)
    cpu_limit = quantity_value(spec.resources.cpu_limit) if spec.resources.cpu_limit else cpu * 2
    spare = (
        spec.rollout.spare_gpu
        if spec.rollout.spare_gpu is not None
        else spec.cold_start.headroom_pods > 0
    )
    if spec.gpu.count == 0 or spare:
        surge, unavailable = 1, 0
    else:
        # No spare device: a surge pod would sit Pending for the whole rollout (§2).
        surge, unavailable = 0, 1
    spot = spot_pool(spec.capacity.provider)
    if spot is not None and spec.capacity.serving.value == "spot" and grace > spot.reclaim_notice_s:
        warnings.append(
            f"grace period {grace}s exceeds the {spot.reclaim_notice_s}s reclaim notice of "
            f"{spot.provider} spot nodes: long requests will be cut when a node is reclaimed"
        )
    window = scale_down_window(spec)
    scaling = spec.autoscaling
    if scaling is not None:
        if scaling.metric is ScalingMetric.CPU and spec.gpu.count > 0:
            warnings.append(
                "autoscaling on CPU for a GPU model (forceCpu): CPU stays low while the GPU "
                "queue grows; prefer queue-depth"
            )
        if window <= spec.model.load_seconds:
            warnings.append(
                f"scale-down window {window}s is not longer than the {spec.model.load_seconds}s "
                "load time (capped at 3600s by the API)"
            )
    return Plan(
        pre_stop_s=pre_stop,
        drain_timeout_s=drain,
        grace_period_s=grace,
        memory=format_bytes(memory),
        cpu_request=format_cpu(cpu),
        cpu_limit=format_cpu(cpu_limit),
        shm=format_bytes(quantity_value(spec.resources.shm)),
        max_surge=surge,
        max_unavailable=unavailable,
        spare_gpu=spare,
        scale_down_window_s=window,
        scale_up_window_s=scale_up_window(spec),
        spot=spot,
        cache_max_bytes=cache_cap_bytes(spec),
        warnings=tuple(warnings),
    )
