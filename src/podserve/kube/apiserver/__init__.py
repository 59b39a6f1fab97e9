"""What a real kube-apiserver (and the admission webhooks and kubelet behind it) would say
about manifests that already pass the OpenAPI/CRD schemas: cross-field checks ported from
the upstream validation code, one module per API group, each with the server's own message
and a link to its source; and the CRDs' CEL rules (`cel`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from podserve.kube.apiserver.apps import check_apps
from podserve.kube.apiserver.autoscaling import check_autoscaling
from podserve.kube.apiserver.core import check_pod_spec
from podserve.kube.apiserver.errors import ErrorType, FieldError, Path, mapping, object_label
from podserve.kube.apiserver.keda import check_keda
from podserve.kube.apiserver.policy import check_policy
from podserve.kube.types import Manifest, Severity

__all__ = [
    "ErrorType",
    "FieldError",
    "check_manifest",
    "check_manifests",
    "server_problems",
]


def _pod(manifest: Manifest) -> Iterator[FieldError]:
    yield from check_pod_spec(object_label(manifest), mapping(manifest.get("spec")), Path("spec"))


def _job(manifest: Manifest) -> Iterator[FieldError]:
    pod = mapping(mapping(mapping(manifest.get("spec")).get("template")).get("spec"))
    yield from check_pod_spec(object_label(manifest), pod, Path("spec.template.spec"))


def _cronjob(manifest: Manifest) -> Iterator[FieldError]:
    job = mapping(mapping(manifest.get("spec")).get("jobTemplate"))
    pod = mapping(mapping(mapping(job.get("spec")).get("template")).get("spec"))
    path = Path("spec.jobTemplate.spec.template.spec")
    yield from check_pod_spec(object_label(manifest), pod, path)


_CHECKS: dict[tuple[str, str], Callable[[Manifest], Iterator[FieldError]]] = {
    ("v1", "Pod"): _pod,
    ("apps/v1", "Deployment"): check_apps,
    ("apps/v1", "ReplicaSet"): check_apps,
    ("apps/v1", "StatefulSet"): check_apps,
    ("apps/v1", "DaemonSet"): check_apps,
    ("batch/v1", "Job"): _job,
    ("batch/v1", "CronJob"): _cronjob,
    ("policy/v1", "PodDisruptionBudget"): check_policy,
    ("autoscaling/v2", "HorizontalPodAutoscaler"): check_autoscaling,
    ("keda.sh/v1alpha1", "ScaledObject"): check_keda,
}


def check_manifest(manifest: Manifest) -> list[FieldError]:
    """The API-server checks for one object (none for kinds without ported checks)."""
    check = _CHECKS.get((str(manifest.get("apiVersion")), str(manifest.get("kind"))))
    return list(check(manifest)) if check is not None else []


def check_manifests(manifests: Iterable[Manifest]) -> list[FieldError]:
    return [problem for manifest in manifests for problem in check_manifest(manifest)]


def server_problems(
    manifests: Iterable[Manifest], catalog: object | None = None
) -> list[FieldError]:
    """API-server checks plus the CRDs' CEL rules (`catalog`: a CrdCatalog, default the
    bundled CRDs); errors first."""
    from podserve.kube.apiserver.cel import cel_errors
    from podserve.kube.validation import CrdCatalog

    chosen = catalog if isinstance(catalog, CrdCatalog) else CrdCatalog.bundled()
    listed = list(manifests)
    problems = check_manifests(listed) + list(cel_errors(listed, chosen))
    return sorted(problems, key=lambda p: p.severity is not Severity.ERROR)
