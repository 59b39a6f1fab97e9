"""GPU spend per namespace: a quota on the GPU resource, and no GPUs held around the clock
where nobody works around the clock."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import PodView, is_gpu_resource
from podserve.kube.types import Severity


def _gpu_names(pod: PodView) -> set[str]:
    return {
        name
        for ctr in pod.containers(init=True)
        for name in ctr.resource_names()
        if is_gpu_resource(name)
    }


def _quota_covers(ctx: LintContext, namespace: str, resource: str) -> bool:
    for doc in ctx.of_kind("ResourceQuota"):
        meta = doc.manifest.get("metadata") or {}
        hard = (doc.manifest.get("spec") or {}).get("hard") or {}
        # Extended resources take only the `requests.` prefix in a quota (kubernetes docs
        # "Resource Quotas" → "Resource quota for extended resources").
        if str(meta.get("namespace", "")) == namespace and f"requests.{resource}" in hard:
            return True
    return False


def _without_quota(ctx: LintContext) -> Iterator[Hit]:
    reported: set[tuple[str, str]] = set()
    for pod in ctx.pods:
        for resource in sorted(_gpu_names(pod)):
            key = (pod.namespace, resource)
            if key in reported or _quota_covers(ctx, pod.namespace, resource):
                continue
            reported.add(key)
            yield Hit(
                pod.document,
                "metadata.namespace",
                f"namespace {pod.namespace or '(default)'} runs {resource} pods and no "
                f"ResourceQuota caps requests.{resource}",
            )


GPU_NAMESPACE_WITHOUT_QUOTA = Rule(
    id="gpu-namespace-without-quota",
    severity=Severity.WARNING,
    title="GPU pods in a namespace without a GPU quota",
    why="Without a ResourceQuota on the GPU resource one namespace can take every GPU in "
    "the cluster: an autoscaler bug, a runaway batch job or a copy-pasted maxReplicas "
    "starves every other team (and, with a cluster autoscaler, buys nodes at GPU prices "
    "until the cloud quota stops it).",
    fix="Add a ResourceQuota with `requests.nvidia.com/gpu` (or the MIG resource) in "
    "spec.hard, sized for the namespace's max replicas plus headroom and batch.",
    check=_without_quota,
)

# Label keys and values that mark an environment as not production (the common
# conventions: `environment`, `env`, `tier`, `stage`).
_ENV_KEYS = ("environment", "env", "tier", "stage", "podserve.dev/environment")
_NON_PRODUCTION = {
    "dev", "development", "test", "testing", "qa", "staging", "stage", "sandbox",
    "preview", "nonprod", "non-production", "experiment", "demo",
}  # fmt: skip


def _non_production(labels: Mapping[str, object]) -> str | None:
    for key in _ENV_KEYS:
        value = str(labels.get(key, "")).lower()
        if value in _NON_PRODUCTION:
            return f"{key}={value}"
    return None


def _marker(ctx: LintContext, pod: PodView) -> str | None:
    for doc in ctx.of_kind("Namespace"):
        meta = doc.manifest.get("metadata") or {}
        if meta.get("name") == pod.namespace:
            found = _non_production(meta.get("labels") or {})
            if found:
                return f"namespace label {found}"
    own = (pod.manifest.get("metadata") or {}).get("labels") or {}
    found = _non_production({**own, **pod.labels})
    return f"label {found}" if found else None


def _has_window(ctx: LintContext, pod: PodView) -> bool:
    for doc in ctx.autoscalers_for(pod):
        triggers = (doc.manifest.get("spec") or {}).get("triggers") or []
        if any(isinstance(t, Mapping) and t.get("type") == "cron" for t in triggers):
            return True
    return False


def _always_on(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.served or not pod.gpu:
            continue
        marker = _marker(ctx, pod)
        if marker and not _has_window(ctx, pod):
            yield Hit(
                pod.document,
                "metadata.labels",
                f"non-production GPU service ({marker}) holds its GPUs around the clock: "
                "no active-hours window",
            )


NONPROD_GPU_ALWAYS_ON = Rule(
    id="nonprod-gpu-always-on",
    severity=Severity.WARNING,
    title="Non-production GPU service without an active-hours window",
    why="A development or staging GPU service is used in working hours, yet a replica "
    "floor keeps a GPU node (and its hourly price) up nights and weekends: two thirds of "
    "the week (12 h on weekdays is 60 of 168 hours). A dev GPU environment scaled to zero "
    "overnight paid for the change in a fortnight in one team's field report. "
    "Non-production is read from an "
    "`environment`/`env`/`tier`/`stage` label (dev, test, staging, ...) on the Namespace "
    "or the workload.",
    fix="Add an active-hours window: a KEDA `cron` trigger (start, end, timezone) beside the "
    "load trigger with minReplicaCount 0 (podserve spec autoscaling.activeHours).",
    check=_always_on,
)
