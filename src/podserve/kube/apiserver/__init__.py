"""What a real kube-apiserver (and the admission webhooks and kubelet behind it) would say
about manifests that already pass the OpenAPI/CRD schemas: cross-field checks ported from
the upstream validation code, one module per API group, each with the server's own message
and a link to its source; and the CRDs' CEL rules (`cel`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import cache

from podserve.kube.apiserver.apps import check_apps
from podserve.kube.apiserver.autoscaling import check_autoscaling
from podserve.kube.apiserver.core import check_pod_spec
from podserve.kube.apiserver.errors import ErrorType, FieldError, Path, mapping, object_label
from podserve.kube.apiserver.keda import check_keda
from podserve.kube.apiserver.policy import check_policy
from podserve.kube.types import Manifest, Severity
from podserve.kube.validation import CrdCatalog

__all__ = [
    "ErrorType",
    "FieldError",
    "check_manifest",
    "check_manifests",
    "self_check",
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


@cache
def _bundled() -> CrdCatalog:
    """The shipped CRDs, parsed once per process (the HTTPRoute CRD alone is 300 kB)."""
    return CrdCatalog.bundled()


def server_problems(
    manifests: Iterable[Manifest], catalog: CrdCatalog | None = None
) -> list[FieldError]:
    """API-server checks plus the CRDs' CEL rules (`catalog`: a CrdCatalog, default the
    bundled CRDs); errors first."""
    from podserve.kube.apiserver.cel import cel_errors

    chosen = catalog if catalog is not None else _bundled()
    listed = list(manifests)
    problems = check_manifests(listed) + list(cel_errors(listed, chosen))
    return sorted(problems, key=lambda p: p.severity is not Severity.ERROR)


def self_check(manifests: Iterable[Manifest]) -> list[FieldError]:
    """`podserve render`'s check of its own output: the API-server checks, plus the bundled
    CRDs' CEL rules when cel-python (the `kube` extra) is installed; without it, one warning
    says the CEL rules were not evaluated."""
    listed = list(manifests)
    try:
        import celpy  # noqa: F401
    except ImportError:
        skipped = FieldError(
            "(render)",
            "",
            ErrorType.FORBIDDEN,
            None,
            "CRD CEL rules not evaluated: install podserve[kube] (cel-python)",
            "",
            Severity.WARNING,
        )
        return [*check_manifests(listed), skipped]
    return server_problems(listed)
