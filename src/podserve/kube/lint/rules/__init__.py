"""Every lint rule, by id. One module per concern; docs/lint-rules.md is generated from
these definitions (`podserve lint --list-rules --format markdown`)."""

from __future__ import annotations

from podserve.kube.lint.model import Rule
from podserve.kube.lint.rules import (
    asyncq,
    autoscaling,
    cache,
    capacity,
    cpu,
    credentials,
    disruption,
    gateway,
    generative,
    gpu,
    gpu_labels,
    images,
    memory,
    placement,
    probes,
    quota,
    rollout,
    routing,
    scaling,
    secrets,
    security,
    shm,
    termination,
    wake,
    workloads,
)

ALL_RULES: tuple[Rule, ...] = tuple(
    sorted(
        (
            gpu.GPU_QUANTITY_NOT_INTEGER,
            gpu.GPU_REQUEST_NOT_LIMIT,
            gpu.GPU_MEMORY_REQUEST_NOT_LIMIT,
            placement.GPU_NO_TOLERATION,
            placement.TOLERATION_WITHOUT_SELECTOR,
            placement.NO_SPREAD,
            probes.LIVENESS_WITHOUT_STARTUP,
            probes.STARTUP_BUDGET_SHORT,
            probes.LIVENESS_READINESS_SAME,
            probes.NO_READINESS,
            probes.LIVENESS_INITIAL_DELAY,
            termination.NO_PRESTOP,
            termination.GRACE_SHORT,
            rollout.SURGE_NEEDS_SPARE_GPU,
            autoscaling.HPA_CPU_ON_GPU,
            autoscaling.SCALE_DOWN_WINDOW_SHORT,
            autoscaling.KEDA_AVERAGE_QUERY,
            disruption.NO_PDB,
            disruption.PDB_BLOCKS_EVICTION,
            shm.NO_SHM,
            shm.SHM_EXCEEDS_LIMIT,
            shm.SHM_NO_SIZE_LIMIT,
            images.IMAGE_LATEST,
            images.MODEL_NOT_PINNED,
            secrets.SECRET_LITERAL_ENV,
            cache.WEIGHTS_BAKED_IN,
            security.CONTAINER_NOT_HARDENED,
            capacity.SPOT_GRACE,
            memory.MEMORY_BELOW_MODEL_SIZE,
            memory.MODEL_EXCEEDS_DEVICE,
            generative.GENERATIVE_NO_CAPS,
            gpu_labels.GPU_LABEL_MISMATCH,
            cpu.CPU_LIMIT_AT_REQUEST,
            placement.SOFT_SPREAD_ONLY,
            disruption.PDB_WEAK_AT_SCALE,
            wake.SCALE_TO_ZERO_SLOW_MODEL,
            wake.ACTIVATION_METRIC_NEEDS_ENDPOINTS,
            scaling.LATENCY_ONLY_SCALING_METRIC,
            scaling.SCALE_UP_SLOWER_THAN_DOWN,
            routing.INFERENCE_POOLS_SHARE_PICKER,
            workloads.BARE_POD,
            workloads.RECREATE_ON_SERVING,
            images.PULL_ALWAYS_ON_GPU,
            quota.GPU_NAMESPACE_WITHOUT_QUOTA,
            quota.NONPROD_GPU_ALWAYS_ON,
            routing.GRPC_WITHOUT_L7_ROUTE,
            routing.RETRIES_IN_TWO_LAYERS,
            credentials.FETCH_WITHOUT_CREDENTIALS,
            asyncq.CONSUMER_NO_DEAD_LETTER,
            asyncq.CONSUMER_GRACE_SHORT,
            asyncq.REDIS_STREAMS_PENDING_NO_WAKE,
            gateway.GATEWAY_REPLICAS_WITHOUT_SHARED_STORE,
        ),
        key=lambda rule: rule.id,
    )
)
_BY_ID = {rule.id: rule for rule in ALL_RULES}


def rule_by_id(rule_id: str) -> Rule | None:
    return _BY_ID.get(rule_id)
