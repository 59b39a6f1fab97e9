"""CPU limits on GPU pods: throttling the host threads that feed the GPU idles the GPU.

The kubelet turns a CPU limit into a CFS bandwidth quota per 100 ms period (kubernetes docs
"Resource Management for Pods and Containers" → "How pods with resource limits are run";
the kernel's Documentation/scheduler/sched-bwc.rst): a container that spends its quota early
in a period waits for the next one."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import quantity
from podserve.kube.types import Severity


def _at_request(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.gpu:
            continue
        for ctr in pod.containers():
            image = str(ctr.spec.get("image", "")).rsplit("/", 1)[-1]
            if image.startswith("pause:") or image == "pause":
                continue  # a placeholder holding a GPU runs no thread that could be throttled
            request, limit = ctr.resource("requests", "cpu"), ctr.resource("limits", "cpu")
            if limit is None:
                continue
            effective = request if request is not None else limit  # request defaults to it
            if quantity(effective) is not None and quantity(effective) == quantity(limit):
                yield Hit(
                    pod.document,
                    f"{ctr.path}.resources.limits.cpu",
                    f"CPU limit {limit} equals the request: the container is throttled as "
                    "soon as it uses what it asked for",
                )


CPU_LIMIT_AT_REQUEST = Rule(
    id="cpu-limit-at-request",
    severity=Severity.WARNING,
    title="CPU limit equal to the request on a GPU pod",
    why="The CFS quota enforces a CPU limit in 100 ms periods: a model server whose "
    "tokenizer, batching, data loading and CUDA launch threads burst above the limit is "
    "throttled for the rest of the period while the GPU waits, so latency spikes and GPU "
    "utilisation drops exactly under load. A GPU pod should have headroom above its CPU "
    "request (the GPU, not the CPU, is the scarce resource).",
    fix="Set resources.limits.cpu above the request (podserve renders twice the request), or "
    "drop the CPU limit. Where limit = request is deliberate (Guaranteed QoS with integer CPUs "
    "for the static CPU manager's exclusive cores), silence the rule with a reason.",
    check=_at_request,
)
