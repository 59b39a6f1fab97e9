"""GPU node labels and taints as each provider really sets them, and the placement (resource
name, node selector, required affinity, tolerations) a GPU pod needs to land on them.

Sources (docs/kubernetes.md has a section per provider):
- NVIDIA GPU feature discovery / GPU Operator: `nvidia.com/gpu.product` is the sanitised
  model, suffixed `-MIG-<profile>` under the single MIG strategy and `-SHARED` for
  time-sliced (not renamed) GPUs; under mixed, each profile gets
  `nvidia.com/mig-<profile>.product = <model>-MIG-<profile>` and the resource
  `nvidia.com/mig-<profile>` (NVIDIA/k8s-device-plugin internal/lm/resource.go,
  internal/lm/mig-strategy.go); `nvidia.com/gpu.sharing-strategy` (api/config/v1/sharing.go);
  `nvidia.com/gpu.present` and `nvidia.com/mig.strategy` (NVIDIA/gpu-operator
  controllers/state_manager.go; internal/lm/strategy.go).
- GKE: `cloud.google.com/gke-accelerator=<type>` on every GPU node; MIG partitions are
  `nvidia.com/gpu` selected by `cloud.google.com/gke-gpu-partition-size`; time-sharing nodes
  carry `cloud.google.com/gke-gpu-sharing-strategy: time-sharing`; GPU pools get the taint
  `nvidia.com/gpu=present:NoSchedule`; GKE writes no `nvidia.com/gpu.*` labels
  (cloud.google.com/kubernetes-engine/docs/how-to/gpus, concepts/timesharing-gpus;
  GoogleCloudPlatform/container-engine-accelerators pkg/gpu/nvidia/manager.go).
- Karpenter on AWS: `karpenter.k8s.aws/instance-gpu-name` (lower-kebab, e.g. `a100`) and
  `karpenter.k8s.aws/instance-gpu-manufacturer` (aws/karpenter-provider-aws
  pkg/apis/v1/labels.go, website concepts/scheduling.md).
- EKS managed node groups: no GPU label by default; the instance type is the well-known
  `node.kubernetes.io/instance-type` (amazon-eks-user-guide ml-eks-optimized-ami.adoc).
- AKS: `kubernetes.azure.com/accelerator=nvidia`; the documented GPU pool taint is
  `sku=gpu:NoSchedule` (MicrosoftDocs/azure-aks-docs articles/aks/use-labels.md,
  use-nvidia-gpu.md).
Tolerations are always explicit: ExtendedResourceToleration only adds one keyed by the
resource name, so a pod asking for `nvidia.com/mig-1g.10gb` is not tolerated for a taint
keyed `nvidia.com/gpu`, nor for AKS's `sku=gpu` (kubernetes/kubernetes PR #55839).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from podserve.config.model_service import ModelServiceSpec
from podserve.config.service_gpu import SHARED_GPU

GFD_PRODUCT = "nvidia.com/gpu.product"
GFD_PRESENT = "nvidia.com/gpu.present"
GFD_SHARING = "nvidia.com/gpu.sharing-strategy"
GFD_MIG_STRATEGY = "nvidia.com/mig.strategy"
GKE_ACCELERATOR = "cloud.google.com/gke-accelerator"
GKE_PARTITION = "cloud.google.com/gke-gpu-partition-size"
GKE_SHARING = "cloud.google.com/gke-gpu-sharing-strategy"
KARPENTER_GPU_NAME = "karpenter.k8s.aws/instance-gpu-name"
KARPENTER_GPU_MAKER = "karpenter.k8s.aws/instance-gpu-manufacturer"
INSTANCE_TYPE = "node.kubernetes.io/instance-type"
AKS_ACCELERATOR = "kubernetes.azure.com/accelerator"

# Where the product goes, and what marks a GPU node when no product is given (key, value;
# value None = the key exists), per provider when their own labels are used.
_PRODUCT_LABEL = {
    "gke": GKE_ACCELERATOR,
    "karpenter": KARPENTER_GPU_NAME,
    "eks": INSTANCE_TYPE,
    "aks": INSTANCE_TYPE,
}
_PRESENT: dict[str, tuple[str, str | None]] = {
    "gke": (GKE_ACCELERATOR, None),
    "karpenter": (KARPENTER_GPU_MAKER, "nvidia"),
    "aks": (AKS_ACCELERATOR, "nvidia"),
}


@dataclass(frozen=True, slots=True)
class GpuPlacement:
    resource: str
    node_selector: dict[str, str] = field(default_factory=dict)
    exists: tuple[str, ...] = ()  # label keys required to exist (required node affinity)
    tolerations: tuple[dict[str, Any], ...] = ()


def _gfd(spec: ModelServiceSpec, selector: dict[str, str]) -> None:
    gpu, provider = spec.gpu, spec.capacity.provider
    strategy, profile = gpu.strategy(provider), gpu.profile
    product_label = gpu.product_label
    if strategy == "mixed":
        if gpu.product:
            selector[product_label or f"nvidia.com/mig-{profile}.product"] = (
                f"{gpu.product}-MIG-{profile}"
            )
        else:
            selector[GFD_MIG_STRATEGY] = "mixed"
        return
    if strategy == "single":
        selector[product_label or GFD_PRODUCT] = f"{gpu.product}-MIG-{profile}"
        return
    if gpu.product:
        shared = gpu.time_slicing and gpu.resource_name(provider) != SHARED_GPU
        selector[product_label or GFD_PRODUCT] = gpu.product + ("-SHARED" if shared else "")
    else:
        selector[gpu.present_label or GFD_PRESENT] = "true"
    if gpu.time_slicing:
        # Time-sliced and whole nodes must not trade pods sized for the other.
        selector[GFD_SHARING] = "time-slicing"


def _provider(spec: ModelServiceSpec, selector: dict[str, str]) -> tuple[str, ...]:
    gpu, provider = spec.gpu, spec.capacity.provider
    exists: tuple[str, ...] = ()
    if gpu.product:
        selector[gpu.product_label or _PRODUCT_LABEL[provider]] = gpu.product
    elif gpu.present_label:
        selector[gpu.present_label] = "true"
    else:
        key, value = _PRESENT[provider]
        if value is None:
            exists = (key,)
        else:
            selector[key] = value
    if provider == "gke" and gpu.profile is not None:
        selector[GKE_PARTITION] = gpu.profile
    if provider == "gke" and gpu.time_slicing:
        selector[GKE_SHARING] = "time-sharing"
    if provider == "aks" and gpu.product:
        # The VM size picks the model; the accelerator label keeps CPU pools out even if a
        # size name is reused.
        selector[AKS_ACCELERATOR] = "nvidia"
    return exists


def gpu_placement(spec: ModelServiceSpec) -> GpuPlacement | None:
    """Resource, labels and tolerations for the spec's GPUs; None for a CPU model."""
    gpu, provider = spec.gpu, spec.capacity.provider
    if gpu.count == 0:
        return None
    selector: dict[str, str] = {}
    exists: tuple[str, ...] = ()
    if gpu.labels(provider) == "gfd":
        _gfd(spec, selector)
    else:
        exists = _provider(spec, selector)
    tolerations = [{"key": gpu.taint_key, "operator": "Exists", "effect": "NoSchedule"}]
    if provider == "aks":
        tolerations.append(
            {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
        )
    return GpuPlacement(
        resource=gpu.resource_name(provider),
        node_selector=dict(sorted(selector.items())),
        exists=exists,
        tolerations=tuple(tolerations),
    )
