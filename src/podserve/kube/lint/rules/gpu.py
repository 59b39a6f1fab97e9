"""GPU resources: whole devices, request = limit, and host memory request = limit."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import is_gpu_resource, quantity
from podserve.kube.types import Severity


def _gpu_integer(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        for ctr in pod.containers(init=True):
            for section in ("requests", "limits"):
                for name in sorted(ctr.resource_names()):
                    value = ctr.resource(section, name)
                    if not is_gpu_resource(name) or value is None:
                        continue
                    number = quantity(value)
                    if number is None or number != number.to_integral_value():
                        yield Hit(
                            pod.document,
                            f"{ctr.path}.resources.{section}.{name}",
                            f"{name} {section} is {value!r}, not a whole number of devices",
                        )


GPU_QUANTITY_NOT_INTEGER = Rule(
    id="gpu-quantity-not-integer",
    severity=Severity.ERROR,
    title="GPU quantity is not an integer",
    why="Extended resources such as nvidia.com/gpu are counted in whole devices; the API "
    "server rejects fractions (`must be an integer`). Sharing a GPU is done by the device "
    "plugin (MIG profiles, time-slicing), never by asking for 0.5.",
    fix="Request a whole number of devices, or a MIG resource (e.g. nvidia.com/mig-1g.10gb) "
    "or time-sliced replicas configured in the device plugin.",
    check=_gpu_integer,
)


def _gpu_request_limit(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        for ctr in pod.containers(init=True):
            for name in sorted(ctr.resource_names()):
                if not is_gpu_resource(name):
                    continue
                request, limit = ctr.resource("requests", name), ctr.resource("limits", name)
                if limit is None:
                    yield Hit(
                        pod.document,
                        f"{ctr.path}.resources.limits.{name}",
                        f"{name} is requested ({request}) without a limit",
                    )
                elif request is not None and quantity(request) != quantity(limit):
                    yield Hit(
                        pod.document,
                        f"{ctr.path}.resources.requests.{name}",
                        f"{name} request {request} differs from limit {limit}",
                    )


GPU_REQUEST_NOT_LIMIT = Rule(
    id="gpu-request-not-limit",
    severity=Severity.ERROR,
    title="GPU request differs from its limit",
    why="GPUs cannot be overcommitted: the API server rejects a request that differs from "
    "the limit (`must be equal to nvidia.com/gpu limit`) and a request without a limit "
    "(`Limit must be set for non overcommitable resources`), kubernetes-semantics.md §4.1.",
    fix="Set the same whole number under resources.requests and resources.limits (or only "
    "the limit).",
    check=_gpu_request_limit,
)


def _memory_equal(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.gpu:
            continue
        for ctr in pod.containers():
            request, limit = ctr.resource("requests", "memory"), ctr.resource("limits", "memory")
            if limit is None:
                yield Hit(
                    pod.document,
                    f"{ctr.path}.resources.limits.memory",
                    f"container {ctr.name} of a GPU pod has no memory limit",
                )
            elif request is not None and quantity(request) != quantity(limit):
                yield Hit(
                    pod.document,
                    f"{ctr.path}.resources.requests.memory",
                    f"memory request {request} differs from limit {limit}",
                )


GPU_MEMORY_REQUEST_NOT_LIMIT = Rule(
    id="gpu-memory-request-not-limit",
    severity=Severity.WARNING,
    title="Memory request differs from limit on a GPU pod",
    why="A model load briefly needs host memory close to the weights' size again; a pod "
    "scheduled on its request but allowed to grow to a higher limit is the first one the "
    "kubelet evicts or the kernel OOM-kills when the node runs short, and a GPU pod that dies "
    "mid-load wastes minutes of an expensive device.",
    fix="Set resources.requests.memory equal to resources.limits.memory, sized for the load "
    "peak plus /dev/shm.",
    check=_memory_equal,
)
