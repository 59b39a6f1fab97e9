"""keda.sh: what KEDA's validating webhook (`vscaledobject.kb.io`) denies in a ScaledObject
(apis/keda/v1alpha1/scaledobject_webhook.go calling `CheckReplicaCountBoundsAreValid` and
`CheckFallbackValid` in scaledobject_types.go, kedacore/keda), plus the HPA behavior KEDA
copies into the HorizontalPodAutoscaler it creates, which the API server then checks
(a window above 3600 s leaves the ScaledObject without an HPA)."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.apiserver.autoscaling import check_behavior
from podserve.kube.apiserver.errors import (
    AUTOSCALING_VALIDATION,
    KEDA_WEBHOOK,
    ErrorType,
    FieldError,
    Path,
    items,
    mapping,
    object_label,
)
from podserve.kube.types import Manifest

WEBHOOK = "vscaledobject.kb.io"
DEFAULT_MAX_REPLICAS = 100  # defaultHPAMaxReplicas
DEFAULT_MIN_REPLICAS = 1  # defaultHPAMinReplicas: what a min of 0 becomes for the HPA


def check_keda(manifest: Manifest) -> Iterator[FieldError]:
    if manifest.get("kind") != "ScaledObject":
        return
    obj = object_label(manifest)
    spec = mapping(manifest.get("spec"))
    low, high, idle = (
        spec.get("minReplicaCount"),
        spec.get("maxReplicaCount"),
        spec.get("idleReplicaCount"),
    )
    # GetHPAMinReplicas: a positive minReplicaCount, else 1; unset counts as 0 here.
    floor = 0 if low is None else (low if isinstance(low, int) and low > 0 else 1)
    ceiling = high if isinstance(high, int) else DEFAULT_MAX_REPLICAS
    if floor > ceiling:
        yield FieldError(
            obj,
            "spec.minReplicaCount",
            ErrorType.WEBHOOK,
            WEBHOOK,
            f"MinReplicaCount={floor} must be less than MaxReplicaCount={ceiling}",
            KEDA_WEBHOOK,
        )
    elif isinstance(idle, int) and idle >= floor:
        yield FieldError(
            obj,
            "spec.idleReplicaCount",
            ErrorType.WEBHOOK,
            WEBHOOK,
            f"IdleReplicaCount={idle} must be less than MinReplicaCount={floor}",
            KEDA_WEBHOOK,
        )
    fallback = spec.get("fallback")
    if isinstance(fallback, dict):
        threshold, replicas = fallback.get("failureThreshold", 0), fallback.get("replicas", 0)
        if (isinstance(threshold, int) and threshold < 0) or (
            isinstance(replicas, int) and replicas < 0
        ):
            yield FieldError(
                obj,
                "spec.fallback",
                ErrorType.WEBHOOK,
                WEBHOOK,
                f"FailureThreshold={threshold} & Replicas={replicas} must both be greater "
                "than or equal to 0",
                KEDA_WEBHOOK,
            )
        for trigger in items(spec.get("triggers")):
            kind = str(mapping(trigger).get("type"))
            if kind in {"cpu", "memory"}:
                yield FieldError(
                    obj,
                    "spec.fallback",
                    ErrorType.WEBHOOK,
                    WEBHOOK,
                    f"type is {kind}, but fallback it is not supported by the CPU & memory scalers",
                    KEDA_WEBHOOK,
                )
    hpa = mapping(mapping(spec.get("advanced")).get("horizontalPodAutoscalerConfig"))
    behavior = hpa.get("behavior")
    if isinstance(behavior, dict):
        path = Path("spec.advanced.horizontalPodAutoscalerConfig.behavior")
        yield from check_behavior(obj, behavior, path, AUTOSCALING_VALIDATION)
