"""Every lint rule, by id. One module per concern; docs/lint-rules.md is generated from
these definitions (`podserve lint --list-rules --format markdown`)."""

from __future__ import annotations

from podserve.kube.lint.model import Rule
from podserve.kube.lint.rules import (
    autoscaling,
    cache,
    capacity,
    disruption,
    gpu,
    images,
    placement,
    probes,
    rollout,
    secrets,
    security,
    shm,
    termination,
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
        ),
        key=lambda rule: rule.id,
    )
)
_BY_ID = {rule.id: rule for rule in ALL_RULES}


def rule_by_id(rule_id: str) -> Rule | None:
    return _BY_ID.get(rule_id)
