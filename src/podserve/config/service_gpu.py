"""The `gpu` section of a ModelService: how many devices, which kind (whole GPU, MIG slice,
time-sliced share), and which node labels pick them out.

The labels differ by who labels the nodes, and a selector on a label nobody writes leaves
every pod Pending. `gpu_placement` (in `podserve.kube.accelerators`) turns this section into
the resource name, node selector and tolerations; this module refuses the combinations
that cannot schedule anywhere (the facts and their sources are in that module and in
docs/kubernetes.md).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from podserve.config.service_base import _Spec

# `nvidia.com/mig-<profile>`: the device plugin's resource name under the mixed strategy
# (NVIDIA/k8s-device-plugin internal/lm/mig-strategy.go, newMigStrategyMixedLabeler).
MIG_RESOURCE = re.compile(r"^nvidia\.com/mig-(?P<profile>[1-7]g\.[0-9]+gb(\.me)?)$")
MIG_PROFILE = r"^[1-7]g\.[0-9]+gb(\.me)?$"
WHOLE_GPU = "nvidia.com/gpu"
# Renamed time-sliced resource (`renameByDefault: true` in the plugin's sharing config).
SHARED_GPU = "nvidia.com/gpu.shared"

Provider = Literal["gke", "eks", "karpenter", "aks", "generic"]
MigStrategy = Literal["none", "single", "mixed"]
NodeLabels = Literal["provider", "gfd"]

# What a product name looks like in each vocabulary, so that a GFD product on GKE (or the
# reverse) is refused instead of rendering a selector no node matches.
_PRODUCT_FORMS: dict[str, tuple[str, str]] = {
    # cloud.google.com/gke-accelerator values: nvidia-tesla-t4, nvidia-l4, nvidia-a100-80gb
    "gke": (r"^nvidia-[a-z0-9-]+$", "a GKE accelerator type such as nvidia-l4"),
    # karpenter.k8s.aws/instance-gpu-name: lower-kebab, e.g. t4, a10g, l4, a100, h100
    "karpenter": (r"^[a-z0-9][a-z0-9-]*$", "a Karpenter GPU name such as a100 or l4"),
    # node.kubernetes.io/instance-type on EC2: g5.xlarge, p4d.24xlarge
    "eks": (r"^[a-z0-9-]+\.[a-z0-9-]+$", "an EC2 instance type such as g5.xlarge"),
    # node.kubernetes.io/instance-type on AKS: the VM size, Standard_NC24ads_A100_v4
    "aks": (r"^Standard_[A-Za-z0-9_]+$", "an Azure VM size such as Standard_NC24ads_A100_v4"),
    # nvidia.com/gpu.product written by GFD: the sanitised model, NVIDIA-A100-SXM4-80GB
    "gfd": (r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", "a GFD product such as NVIDIA-A100-SXM4-80GB"),
}


class Gpu(_Spec):
    count: int = Field(
        0, ge=0, le=16, description="Devices per pod (0: a CPU model). Request = limit."
    )
    resource: str | None = Field(
        None,
        pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[a-z0-9]([-a-z0-9._]*[a-z0-9])?$",
        description="Extended resource name. Default: `nvidia.com/mig-<migProfile>` under the "
        "mixed MIG strategy, else `nvidia.com/gpu`. Naming a MIG resource here implies the "
        "mixed strategy and its profile.",
    )
    product: str | None = Field(
        None,
        description="The GPU model in the vocabulary of the labels used (see nodeLabels): "
        "GFD `NVIDIA-A100-SXM4-80GB`, GKE `nvidia-l4`, Karpenter `a100`, EKS instance type "
        "`p4d.24xlarge`, AKS VM size `Standard_NC24ads_A100_v4`. Never with a `-MIG-` or "
        "`-SHARED` suffix: those follow from migProfile and timeSlicing.",
    )
    mig_profile: str | None = Field(
        None,
        pattern=MIG_PROFILE,
        description="MIG profile of each device, e.g. `1g.10gb` (`+me` profiles are written "
        "`.me`, as the device plugin names them).",
    )
    mig_strategy: MigStrategy | None = Field(
        None,
        description="The device plugin's `migStrategy`: `mixed` (resource "
        "`nvidia.com/mig-<profile>`, label `nvidia.com/mig-<profile>.product`) or `single` "
        "(resource `nvidia.com/gpu`, label `nvidia.com/gpu.product: <product>-MIG-<profile>`). "
        "Default: mixed when a MIG profile is given (single on GKE, whose plugin exposes "
        "partitions as nvidia.com/gpu), none otherwise.",
    )
    node_labels: NodeLabels | None = Field(
        None,
        description="Whose node labels to select on: `provider` (GKE, EKS, Karpenter, AKS "
        "set their own) or `gfd` (NVIDIA GPU feature discovery, run by the GPU Operator). "
        "Default: gfd for capacity.provider generic, provider otherwise.",
    )
    product_label: str | None = Field(
        None, description="Override the node label that carries the product."
    )
    present_label: str | None = Field(
        None,
        description='Override the node label (value "true") marking GPU nodes when no '
        "product is given.",
    )
    taint_key: str = Field(
        "nvidia.com/gpu", description="Key of the taint GPU nodes carry; pods tolerate it."
    )
    time_slicing: bool = Field(
        False,
        description="GPUs are shared by time-slicing: no memory isolation, so count must be 1 "
        "and pods land only on nodes labelled for it.",
    )

    @model_validator(mode="after")
    def _kind(self) -> Gpu:
        if self.time_slicing and self.count != 1:
            raise ValueError(
                "gpu.timeSlicing needs gpu.count 1: a pod asking for several "
                "slices gets no more compute, only more contention"
            )
        mig = MIG_RESOURCE.match(self.resource or "")
        if mig and self.mig_profile is not None and mig["profile"] != self.mig_profile:
            raise ValueError(
                f"gpu.resource {self.resource} names profile {mig['profile']} but "
                f"gpu.migProfile is {self.mig_profile}"
            )
        if mig and self.mig_strategy in ("single", "none"):
            raise ValueError(
                f"gpu.resource {self.resource} exists only under the device plugin's mixed "
                f"MIG strategy; under {self.mig_strategy} MIG devices are nvidia.com/gpu "
                "(drop gpu.resource, or set migStrategy: mixed)"
            )
        if self.mig_strategy in ("single", "mixed") and self.profile is None:
            raise ValueError(f"gpu.migStrategy {self.mig_strategy} needs gpu.migProfile")
        if self.mig_strategy == "none" and self.profile is not None:
            raise ValueError("gpu.migProfile with migStrategy none: MIG devices need a strategy")
        if self.profile is not None and self.time_slicing:
            raise ValueError("gpu.timeSlicing and a MIG profile: pick one way to share a GPU")
        product = self.product or ""
        if "-MIG-" in product or product.endswith("-SHARED"):
            raise ValueError(
                f"gpu.product {product!r} carries a suffix the renderer adds: give the GPU "
                "model and set migProfile / timeSlicing instead"
            )
        return self

    @property
    def profile(self) -> str | None:
        """The MIG profile, from migProfile or from a `nvidia.com/mig-<profile>` resource."""
        if self.mig_profile is not None:
            return self.mig_profile
        mig = MIG_RESOURCE.match(self.resource or "")
        return mig["profile"] if mig else None

    def strategy(self, provider: Provider) -> MigStrategy:
        if self.mig_strategy is not None:
            return self.mig_strategy
        if self.profile is None:
            return "none"
        return "single" if provider == "gke" else "mixed"

    def labels(self, provider: Provider) -> NodeLabels:
        if self.node_labels is not None:
            return self.node_labels
        return "gfd" if provider == "generic" else "provider"

    def resource_name(self, provider: Provider) -> str:
        if self.resource is not None:
            return self.resource
        if self.strategy(provider) == "mixed":
            return f"nvidia.com/mig-{self.profile}"
        return WHOLE_GPU


def gpu_problem(gpu: Gpu, provider: Provider) -> str | None:
    """Why this GPU section cannot schedule on `provider`'s nodes, or None."""
    if gpu.count == 0:
        return None
    labels = gpu.labels(provider)
    strategy = gpu.strategy(provider)
    if labels == "provider" and provider == "generic":
        return "capacity.provider generic has no provider labels: use gpu.nodeLabels gfd"
    if labels == "provider" and gpu.profile is not None:
        if provider != "gke":
            return (
                f"MIG on {provider} is exposed by the NVIDIA device plugin / GPU Operator, "
                "whose GFD labels carry the profile: set gpu.nodeLabels: gfd"
            )
        if strategy == "mixed":
            return (
                "GKE's device plugin exposes MIG partitions as nvidia.com/gpu (selected by "
                "cloud.google.com/gke-gpu-partition-size), never nvidia.com/mig-<profile>: "
                "use migStrategy single or gpu.nodeLabels gfd with the GPU Operator"
            )
    if labels == "provider" and gpu.time_slicing and provider != "gke":
        return (
            f"{provider} does not time-slice GPUs itself; the NVIDIA device plugin's "
            "sharing config does, and GFD labels the nodes: set gpu.nodeLabels: gfd"
        )
    if labels == "gfd" and strategy == "single" and gpu.product is None:
        return (
            "MIG single strategy: only nvidia.com/gpu.product (<product>-MIG-<profile>) tells "
            "a MIG node from a whole-GPU node; set gpu.product"
        )
    if labels == "provider" and provider == "eks" and gpu.product is None:
        return (
            "EKS managed node groups carry no GPU label by default: set gpu.product (the "
            "instance type) or use the GPU Operator's labels (gpu.nodeLabels: gfd)"
        )
    if gpu.product is not None and gpu.product_label is None:
        pattern, example = _PRODUCT_FORMS[labels if labels == "gfd" else provider]
        if not re.match(pattern, gpu.product) or (
            labels == "gfd" and re.match(_PRODUCT_FORMS["gke"][0], gpu.product)
        ):
            return f"gpu.product {gpu.product!r} is not {example}"
    return None
