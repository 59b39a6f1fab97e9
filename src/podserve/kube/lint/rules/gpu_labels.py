"""GPU node labels that exist for the resource and the cluster the pod asks for.

NVIDIA device plugin MIG strategies (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go,
README "MIG support"): under `single` every MIG device is an `nvidia.com/gpu` and GFD sets
`nvidia.com/gpu.product=<model>-MIG-<profile>`; under `mixed` each profile is its own
resource `nvidia.com/mig-<profile>` with labels `nvidia.com/mig-<profile>.{product,count,
memory,...}` (a `-MIG-` product value is the single strategy's). GKE's own device plugin
(GoogleCloudPlatform/container-engine-accelerators pkg/gpu/nvidia/manager.go) advertises MIG
partitions as `nvidia.com/gpu` and writes no `nvidia.com/gpu.*` labels; GKE, EKS (managed
node groups, Karpenter) and AKS nodes carry GFD labels only when GPU feature discovery or
the GPU Operator runs there (the Operator also sets `nvidia.com/gpu.present=true`, and on
GKE needs the node label `gke-no-default-nvidia-gpu-device-plugin=true`)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import PodView, is_gpu_resource
from podserve.kube.lint.signals import required_labels
from podserve.kube.types import Severity

_MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(.+)$")
_MIG_LABEL = re.compile(r"^nvidia\.com/mig-(.+)\.[a-z.-]+$")
_PROVIDERS = (
    ("GKE", ("cloud.google.com/gke-",)),
    ("EKS", ("eks.amazonaws.com/", "karpenter.k8s.aws/", "k8s.amazonaws.com/")),
    ("AKS", ("kubernetes.azure.com/", "karpenter.azure.com/")),
    ("Karpenter", ("karpenter.sh/",)),
)
_OPERATOR_PROOF = ("nvidia.com/gpu.present", "gke-no-default-nvidia-gpu-device-plugin")


def _provider(pod: PodView) -> str | None:
    keys = [term[0] for term in pod.node_terms()]
    keys += [str(t.get("key", "")) for t in pod.tolerations()]
    for name, prefixes in _PROVIDERS:
        if any(key.startswith(prefixes) for key in keys):
            return name
    return None


def _resources(pod: PodView) -> set[str]:
    return {
        name
        for ctr in pod.containers(init=True)
        for name in ctr.resource_names()
        if is_gpu_resource(name)
    }


def _mig_problems(pod: PodView, labels: dict[str, list[str]]) -> Iterator[tuple[str, str]]:
    for resource in sorted(_resources(pod)):
        mixed = _MIG_RESOURCE.match(resource)
        product = labels.get("nvidia.com/gpu.product", [])
        if mixed:
            profile = mixed[1]
            if any("-MIG-" in value for value in product):
                yield (
                    "nodeSelector.nvidia.com/gpu.product",
                    f"requests {resource} (mixed strategy) but selects the single strategy's "
                    f"product label {product[0]}; under mixed the label is "
                    f"nvidia.com/mig-{profile}.product",
                )
            for key in labels:
                other = _MIG_LABEL.match(key)
                if other and other[1] != profile:
                    yield (
                        f"nodeSelector.{key}",
                        f"requests {resource} but selects nodes by profile {other[1]}",
                    )
        elif resource == "nvidia.com/gpu":
            for key in labels:
                if _MIG_LABEL.match(key):
                    yield (
                        f"nodeSelector.{key}",
                        f"selects the mixed strategy's label {key} but requests "
                        "nvidia.com/gpu, which under mixed counts only GPUs without MIG",
                    )


def _provider_problems(pod: PodView, labels: dict[str, list[str]]) -> Iterator[tuple[str, str]]:
    provider = _provider(pod)
    if provider is None:
        return
    if provider == "GKE":
        for resource in sorted(_resources(pod)):
            if _MIG_RESOURCE.match(resource):
                yield (
                    f"resources.{resource}",
                    f"GKE's device plugin advertises MIG partitions as nvidia.com/gpu "
                    f"(select cloud.google.com/gke-gpu-partition-size), never {resource}",
                )
    gfd = sorted(k for k in labels if k.startswith(("nvidia.com/gpu.", "nvidia.com/mig")))
    gfd = [k for k in gfd if k not in _OPERATOR_PROOF]
    if gfd and not any(key in labels for key in _OPERATOR_PROOF):
        yield (
            f"nodeSelector.{gfd[0]}",
            f"requires GPU feature discovery label {gfd[0]} on {provider} nodes, which carry "
            "it only when GFD or the GPU Operator runs there",
        )


def _mismatch(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.gpu:
            continue
        labels = required_labels(pod)
        for field, message in [*_mig_problems(pod, labels), *_provider_problems(pod, labels)]:
            yield Hit(pod.document, f"{pod.pod_path}.{field}", message)


GPU_LABEL_MISMATCH = Rule(
    id="gpu-label-mismatch",
    severity=Severity.ERROR,
    title="GPU node labels that do not exist for this resource or provider",
    why="A GPU pod schedules only on nodes that carry every label it requires. The NVIDIA "
    "device plugin's MIG strategies name resources and labels differently (single: "
    "nvidia.com/gpu with product <model>-MIG-<profile>; mixed: nvidia.com/mig-<profile> with "
    "nvidia.com/mig-<profile>.product), and managed GKE, EKS and AKS GPU nodes carry their "
    "own labels (cloud.google.com/gke-accelerator, karpenter.k8s.aws/instance-gpu-name, "
    "kubernetes.azure.com/accelerator), not GPU feature discovery's. A pod that mixes them "
    "stays Pending forever with `didn't match Pod's node affinity/selector`.",
    fix="Match the label to the strategy and provider: mixed → nvidia.com/mig-<profile> with "
    "nvidia.com/mig-<profile>.product; single or GKE → nvidia.com/gpu (GKE: "
    "cloud.google.com/gke-gpu-partition-size); provider labels on managed nodes, GFD labels "
    "only where the GPU Operator runs (then also require nvidia.com/gpu.present=true).",
    check=_mismatch,
)
