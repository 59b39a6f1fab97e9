"""Apply order: what others depend on goes first (quotas and accounts before pods, workloads
before the autoscalers and routes that point at them)."""

from __future__ import annotations

from collections.abc import Iterable

from podserve.kube.types import Manifest

APPLY_ORDER = (
    "Namespace",
    "PriorityClass",
    "ResourceQuota",
    "LimitRange",
    "ServiceAccount",
    "ConfigMap",
    "Secret",
    "NetworkPolicy",
    "PersistentVolumeClaim",
    "Service",
    "DaemonSet",
    "Deployment",
    "StatefulSet",
    "Job",
    "CronJob",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    # before the ScaledObject that names it: KEDA reports the scaler broken until it exists
    "TriggerAuthentication",
    "ScaledObject",
    "PodMonitor",
    "PrometheusRule",
    "InferencePool",
    "HTTPRoute",
)
_RANK = {kind: index for index, kind in enumerate(APPLY_ORDER)}


def apply_key(manifest: Manifest) -> tuple[int, str, str]:
    kind = str(manifest.get("kind", ""))
    name = str(manifest.get("metadata", {}).get("name", ""))
    return (_RANK.get(kind, len(_RANK)), kind, name)


def in_apply_order(manifests: Iterable[Manifest]) -> list[Manifest]:
    return sorted(manifests, key=apply_key)
