"""/dev/shm: a Memory emptyDir, sized, and counted inside the memory limit
(kubernetes-semantics.md §5)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import PodView, quantity
from podserve.kube.types import Severity


def shm_volume(pod: PodView) -> tuple[int, Mapping[str, Any]] | None:
    """The Memory emptyDir mounted at /dev/shm in a main container, with its index."""
    mounted = {
        str(m.get("name"))
        for ctr in pod.containers()
        for m in ctr.spec.get("volumeMounts") or []
        if m.get("mountPath") == "/dev/shm"
    }
    for index, volume in enumerate(pod.volumes()):
        empty = volume.get("emptyDir")
        if (
            volume.get("name") in mounted
            and isinstance(empty, Mapping)
            and (empty.get("medium") == "Memory")
        ):
            return index, volume
    return None


def _no_shm(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if pod.gpu and shm_volume(pod) is None:
            yield Hit(
                pod.document,
                f"{pod.pod_path}.volumes",
                "GPU pod without a Memory emptyDir at /dev/shm (the runtime default is 64 MiB)",
            )


NO_SHM = Rule(
    id="no-shm-volume",
    severity=Severity.WARNING,
    title="No /dev/shm Memory volume on a GPU pod",
    why="Container runtimes give /dev/shm 64 MiB. PyTorch data loaders, NCCL and "
    "tensor-parallel engines use shared memory and fail with bus errors or hang when it "
    "runs out — often only under load.",
    fix="Mount `emptyDir: {medium: Memory, sizeLimit: 8Gi}` at /dev/shm and add the size to "
    "the container's memory limit.",
    check=_no_shm,
)


def _shm_limit(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        found = shm_volume(pod)
        if found is None:
            continue
        index, volume = found
        size = (
            quantity(volume["emptyDir"].get("sizeLimit"))
            if volume["emptyDir"].get("sizeLimit") is not None
            else None
        )
        if size is None:
            continue
        for ctr in pod.containers():
            limit = ctr.resource("limits", "memory")
            if limit is not None and (value := quantity(limit)) is not None and size >= value:
                yield Hit(
                    pod.document,
                    f"{pod.pod_path}.volumes[{index}].emptyDir.sizeLimit",
                    f"/dev/shm sizeLimit {volume['emptyDir']['sizeLimit']} is not below "
                    f"container {ctr.name}'s memory limit {limit}",
                )


SHM_EXCEEDS_LIMIT = Rule(
    id="shm-exceeds-memory-limit",
    severity=Severity.ERROR,
    title="/dev/shm sizeLimit at or above the memory limit",
    why="A Memory emptyDir is tmpfs charged to the container's memory cgroup: filling /dev/shm "
    "to a sizeLimit at or above the memory limit OOM-kills the container before the size "
    "limit is ever reached, leaving no room for the process itself.",
    fix="Keep the shm sizeLimit well below the memory limit, and raise the memory limit by "
    "the shm size (podserve render adds it for you).",
    check=_shm_limit,
)


def _shm_unsized(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        found = shm_volume(pod)
        if found is not None and found[1]["emptyDir"].get("sizeLimit") is None:
            yield Hit(
                pod.document,
                f"{pod.pod_path}.volumes[{found[0]}].emptyDir",
                "/dev/shm Memory emptyDir without sizeLimit",
            )


SHM_NO_SIZE_LIMIT = Rule(
    id="shm-no-size-limit",
    severity=Severity.WARNING,
    title="/dev/shm without a sizeLimit",
    why="Without sizeLimit the tmpfs is sized to the node's allocatable memory (or the pod "
    "limit); shared-memory use then surfaces as an OOM kill of the server rather than a "
    "clear eviction message naming the volume.",
    fix="Set emptyDir.sizeLimit on the /dev/shm volume and count it in the memory limit.",
    check=_shm_unsized,
)
