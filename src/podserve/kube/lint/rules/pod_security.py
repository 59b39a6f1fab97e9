"""hostPath volumes in a namespace whose Pod Security admission refuses them.

The Pod Security Standards forbid hostPath volumes from the `baseline` level up
(kubernetes.io/docs/concepts/security/pod-security-standards, Baseline, "HostPath Volumes":
`spec.volumes[*].hostPath` must be undefined/nil; levels are cumulative, so `restricted`
forbids them too). The admission plugin implements that as the baseline check
`hostPathVolumes` (kubernetes/pod-security-admission policy/check_hostPathVolumes.go), whose
refusal reads `violates PodSecurity "baseline:latest": hostPath volumes (volume "cache")`.
A namespace enforces a level with the label `pod-security.kubernetes.io/enforce`; `warn`
and `audit` only report. `enforce` applies to pods, not to their controllers: the
Deployment or StatefulSet is accepted and its pods are refused, so the rollout sits at
zero ready replicas with FailedCreate events.

`restricted` also refuses podserve's hostPath owner step, which runs as root
(runAsNonRoot, policy/check_runAsNonRoot.go) and adds CHOWN (restricted allows adding only
NET_BIND_SERVICE, policy/check_capabilities_restricted.go); `baseline` allows both (CHOWN is
in its allowed list, policy/check_capabilities_baseline.go)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import Container, PodView
from podserve.kube.types import Severity

ENFORCE = "pod-security.kubernetes.io/enforce"
_REFUSING = ("baseline", "restricted")


def enforced_levels(ctx: LintContext) -> dict[str, str]:
    """Namespace name -> the Pod Security level it enforces, for the Namespaces linted."""
    levels: dict[str, str] = {}
    for doc in ctx.of_kind("Namespace"):
        meta = doc.manifest.get("metadata")
        if not isinstance(meta, Mapping):
            continue
        labels = meta.get("labels")
        level = str(labels.get(ENFORCE, "")) if isinstance(labels, Mapping) else ""
        if level in _REFUSING:
            levels[str(meta.get("name", ""))] = level
    return levels


def _runs_as_root_with_chown(ctr: Container) -> bool:
    context = ctr.spec.get("securityContext")
    if not isinstance(context, Mapping):
        return False
    caps = context.get("capabilities")
    added = caps.get("add") if isinstance(caps, Mapping) else None
    return context.get("runAsUser") == 0 or (isinstance(added, list) and "CHOWN" in added)


def _owner_steps(pod: PodView) -> list[str]:
    return [ctr.name for ctr in pod.containers(init=True) if _runs_as_root_with_chown(ctr)]


def _hostpath_refused(ctx: LintContext) -> Iterator[Hit]:
    levels = enforced_levels(ctx)
    for pod in ctx.pods:
        level = levels.get(pod.namespace)
        if level is None:
            continue
        for volume in pod.volumes():
            host = volume.get("hostPath")
            if not isinstance(host, Mapping):
                continue
            message = (
                f'namespace {pod.namespace} enforces Pod Security "{level}", which refuses '
                f'hostPath volumes (volume "{volume.get("name")}", {host.get("path")}): '
                "the workload is accepted and its pods are not"
            )
            owners = _owner_steps(pod)
            if level == "restricted" and owners:
                message += (
                    f"; restricted also refuses the root, CHOWN init step "
                    f"{', '.join(owners)} (runAsNonRoot, capabilities)"
                )
            yield Hit(pod.document, f"{pod.pod_path}.volumes[{volume.get('name')}]", message)


HOSTPATH_CACHE_UNDER_POD_SECURITY = Rule(
    id="hostpath-cache-under-pod-security",
    severity=Severity.ERROR,
    title="hostPath cache in a namespace whose Pod Security level refuses it",
    why="The Pod Security Standards forbid hostPath volumes at the baseline and restricted "
    "levels (kubernetes/pod-security-admission check hostPathVolumes). In a namespace "
    "labelled pod-security.kubernetes.io/enforce: baseline or restricted, admission accepts "
    "the Deployment or StatefulSet and refuses every pod it creates (violates PodSecurity "
    '"baseline:latest": hostPath volumes), so the service never gets a replica. Under '
    "restricted the hostPath cache's owner step (root, CHOWN) is refused as well. Read from "
    "the Namespace objects linted with the workload; a cluster-wide default level set in "
    "the admission configuration is not visible here.",
    fix="Use a cache that needs no host access: spec cache.kind pvc (a claim per replica, or "
    "ReadWriteMany) or emptyDir, or run the service in a namespace whose enforce level is "
    "privileged (an exemption the cluster owner grants).",
    check=_hostpath_refused,
)
