"""Container hardening that model servers routinely skip."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity


def _gaps(pod_ctx: dict[str, object], ctx: dict[str, object]) -> list[str]:
    gaps = []
    non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
    user = ctx.get("runAsUser", pod_ctx.get("runAsUser"))
    if non_root is not True or user == 0:
        gaps.append("runAsNonRoot")
    if ctx.get("readOnlyRootFilesystem") is not True:
        gaps.append("readOnlyRootFilesystem")
    if ctx.get("allowPrivilegeEscalation") is not False:
        gaps.append("allowPrivilegeEscalation: false")
    caps = ctx.get("capabilities")
    drops = caps.get("drop") if isinstance(caps, dict) else None
    if not isinstance(drops, list) or "ALL" not in drops:
        gaps.append("capabilities.drop [ALL]")
    return gaps


def _owner_step(spec: dict[str, object]) -> bool:
    """A hostPath owner step: runs `chown` as root with CAP_CHOWN as its only capability
    (the kubelet creates hostPath directories root-owned and fsGroup does not apply)."""
    ctx = spec.get("securityContext")
    command = spec.get("command")
    if not isinstance(ctx, dict) or not isinstance(command, list) or command[:1] != ["chown"]:
        return False
    caps = ctx.get("capabilities") or {}
    return (
        isinstance(caps, dict)
        and caps.get("add") == ["CHOWN"]
        and "ALL" in (caps.get("drop") or [])
        and ctx.get("allowPrivilegeEscalation") is False
        and ctx.get("readOnlyRootFilesystem") is True
    )


def _hardened(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if pod.runtime_managed:
            continue
        pod_ctx = dict(pod.pod.get("securityContext") or {})
        for ctr in pod.containers(init=True):
            if _owner_step(dict(ctr.spec)):
                continue
            gaps = _gaps(pod_ctx, dict(ctr.spec.get("securityContext") or {}))
            if gaps:
                yield Hit(
                    pod.document,
                    f"{ctr.path}.securityContext",
                    f"container {ctr.name} lacks {', '.join(gaps)}",
                )


CONTAINER_NOT_HARDENED = Rule(
    id="container-not-hardened",
    severity=Severity.WARNING,
    title="Container runs as root, writable or with capabilities",
    why="Model servers deserialize files from remote storage (pickles, custom code) and run "
    "with access to expensive devices. Running as non-root, on a read-only root filesystem "
    "without capabilities limits what a malicious model or a server exploit can do.",
    fix="Set runAsNonRoot: true (podserve's image runs as uid 10001), readOnlyRootFilesystem: "
    "true (write to /tmp and the cache volume), allowPrivilegeEscalation: false and "
    "capabilities.drop: [ALL].",
    check=_hardened,
)
