"""Weights baked into the image (heuristic)."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity

_CACHE_SOURCES = {"persistentVolumeClaim", "hostPath", "ephemeral", "csi", "image", "nfs"}


def _baked(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.gpu or pod.extra_models or not pod.served:
            continue
        if pod.pod.get("initContainers") or not any(
            ctr.spec.get("ports") for ctr in pod.containers()
        ):
            continue  # fetched by an init container, or not a server (placeholders)
        disk = [
            v
            for v in pod.volumes()
            if _CACHE_SOURCES & set(v)
            or (isinstance(v.get("emptyDir"), dict) and v["emptyDir"].get("medium") != "Memory")
        ]
        if not disk:
            yield Hit(
                pod.document,
                f"{pod.pod_path}.volumes",
                "GPU pod with no model volume and no init container: the weights seem "
                "to be baked into the image",
            )


WEIGHTS_BAKED_IN = Rule(
    id="weights-baked-in",
    severity=Severity.INFO,
    title="Weights apparently baked into the image",
    why="Images with multi-gigabyte weights are pulled whole on every new node, so cold "
    "starts and scale-ups take as long as the registry allows, and every model update is an "
    "image rebuild. A cache volume filled by a verified fetch is shared by pods on a node "
    "and survives restarts.",
    fix="Fetch the weights in an init container (`podserve fetch URI --digest ...`) into a "
    "hostPath, PVC or emptyDir cache volume.",
    check=_baked,
)
