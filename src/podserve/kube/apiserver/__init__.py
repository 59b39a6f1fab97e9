"""What a real kube-apiserver (and the admission webhooks and kubelet behind it) would say
about manifests that already pass the OpenAPI/CRD schemas: cross-field checks ported from
the upstream validation code, one module per API group, each with the server's own message
and a link to its source; and the CRDs' CEL rules (`cel`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cache

from podserve.kube.apiserver.apps import check_apps
from podserve.kube.apiserver.autoscaling import check_autoscaling
from podserve.kube.apiserver.core import check_pod_spec
from podserve.kube.apiserver.endpoints import FIND_PORT, check_service_ports
from podserve.kube.apiserver.errors import (
    APPS_VALIDATION,
    AUTOSCALING_VALIDATION,
    CEL_VALIDATION,
    CORE_VALIDATION,
    KEDA_WEBHOOK,
    KUBELET_PROBER,
    POLICY_VALIDATION,
    ErrorType,
    FieldError,
    Path,
    mapping,
    object_label,
)
from podserve.kube.apiserver.keda import check_keda
from podserve.kube.apiserver.policy import check_policy
from podserve.kube.types import Manifest, Severity
from podserve.kube.validation import CrdCatalog

__all__ = [
    "PORTED_CHECKS",
    "ErrorType",
    "FieldError",
    "PortedCheck",
    "check_manifest",
    "check_manifests",
    "check_service_ports",
    "self_check",
    "server_problems",
]


@dataclass(frozen=True, slots=True)
class PortedCheck:
    """One ported check, for the generated docs (docs/lint-rules.md)."""

    kinds: str
    what: str
    message: str  # the server's words (the value part shown as <value>)
    source: str


PORTED_CHECKS: tuple[PortedCheck, ...] = (
    PortedCheck("pods, pod templates", "extended resource (GPU, MIG) is a whole number",
                "resources.limits[nvidia.com/gpu]: Invalid value: 500m: must be an integer",
                CORE_VALIDATION),
    PortedCheck("pods, pod templates", "extended resource request equals its limit",
                'resources.requests: Invalid value: "1": must be equal to nvidia.com/gpu '
                "limit of 2", CORE_VALIDATION),
    PortedCheck("pods, pod templates", "extended resource request has a limit",
                "resources.limits: Required value: Limit must be set for non overcommitable "
                "resources", CORE_VALIDATION),
    PortedCheck("pods, pod templates", "container port names are IANA_SVC_NAME and unique",
                'ports[0].name: Invalid value: "http-metrics-port": must be no more than 15 '
                "characters", CORE_VALIDATION),
    PortedCheck("pods, pod templates", "probe port names are IANA_SVC_NAME",
                'readinessProbe.httpGet.port: Invalid value: "<name>": must be no more than '
                "15 characters", CORE_VALIDATION),
    PortedCheck("pods, pod templates", "probe names a port its container declares (warning: "
                "accepted, fails at run time)", "port <name> not found", KUBELET_PROBER),
    PortedCheck("pods, pod templates", "preStop/postStart sleep within the grace period "
                "(30 s when unset)", "lifecycle.preStop.sleep.seconds: Invalid value: 40: must "
                "be non-negative and less than terminationGracePeriodSeconds (30)",
                CORE_VALIDATION),
    PortedCheck("pods, pod templates", "topology spread: maxSkew > 0, minDomains only with "
                "DoNotSchedule, no duplicate (topologyKey, whenUnsatisfiable), matchLabelKeys "
                "beside a labelSelector and disjoint from it",
                'topologySpreadConstraints[0].matchLabelKeys[0]: Invalid value: "app": exists '
                "in both matchLabelKeys and labelSelector", CORE_VALIDATION),
    PortedCheck("Service + the pod templates it selects", "a named targetPort exists (name "
                "and protocol) in a selected pod (warning: accepted, the Service gets no "
                "endpoints)", "no suitable port for manifest", FIND_PORT),
    PortedCheck("Deployment, ReplicaSet, StatefulSet, DaemonSet", "selector matches the "
                "template labels, and is not empty",
                "spec.template.metadata.labels: Invalid value: <labels>: `selector` does not "
                "match template `labels`", APPS_VALIDATION),
    PortedCheck("Deployment", "maxSurge and maxUnavailable not both 0 (after the 25% "
                "defaults); Recreate takes no rollingUpdate",
                "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 "
                "when `maxSurge` is 0", APPS_VALIDATION),
    PortedCheck("DaemonSet", "exactly one of maxSurge and maxUnavailable is non-zero",
                "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be "
                "0 when maxSurge is 0", APPS_VALIDATION),
    PortedCheck("PodDisruptionBudget", "minAvailable and maxUnavailable are exclusive",
                "spec: Invalid value: <spec>: minAvailable and maxUnavailable cannot be both "
                "set", POLICY_VALIDATION),
    PortedCheck("HorizontalPodAutoscaler v2, ScaledObject behavior", "stabilization windows "
                "0..3600 s, policy periods 1..1800 s, replica bounds",
                "spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: 3601: must "
                "be less than or equal to 3600", AUTOSCALING_VALIDATION),
    PortedCheck("ScaledObject (KEDA webhook)", "minReplicaCount ≤ maxReplicaCount, idle < "
                "min, fallback not on cpu/memory",
                'admission webhook "vscaledobject.kb.io" denied the request: MinReplicaCount=5 '
                "must be less than MaxReplicaCount=3", KEDA_WEBHOOK),
    PortedCheck("custom resources", "the CRD's CEL rules (x-kubernetes-validations), after "
                "defaulting, self per node, transition rules skipped on create",
                'spec.rules[0]: Invalid value: "object": <the rule\'s message>', CEL_VALIDATION),
)  # fmt: skip


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
    """Each object's checks, then the checks across objects (a Service's named targetPort
    against the pod templates it selects)."""
    listed = list(manifests)
    own = [problem for manifest in listed for problem in check_manifest(manifest)]
    return own + [problem for _, problem in check_service_ports(listed)]


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
