"""What the newer rules read from manifests beyond the pod itself: the model's size and
kind (annotations podserve render writes, readable on any manifest), the GPU memory a
pod's node selection implies, the provider its labels reveal, and the objects that point
at a pod (Services, routes, ServiceAccounts).

Device memory comes from names, never from a guess: a MIG profile names its memory
(`1g.10gb`: NVIDIA MIG user guide, "Supported MIG Profiles"); GFD's `nvidia.com/gpu.memory`
and Karpenter's `karpenter.k8s.aws/instance-gpu-memory` are MiB per GPU
(NVIDIA/k8s-device-plugin docs/gpu-feature-discovery; aws/karpenter-provider-aws
pkg/apis/v1/labels.go); GFD product names and GKE accelerator types carry the size
(`NVIDIA-A100-SXM4-80GB`, `nvidia-a100-80gb`), and the few that do not are in a table.
A nominal "80GB" or "10gb" is read as GiB: what the devices really report is at or just
below that (an A100 80GB has 81920 MiB, an A100-80GB 1g.10gb slice 9728 MiB), so a misfit
the rules report is real; one within a few percent of the limit may pass."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from decimal import Decimal
from typing import Any

import yaml

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.pods import Container, PodView, is_gpu_resource, quantity
from podserve.kube.types import Document

MODEL_SIZE = "podserve.dev/model-size"  # Kubernetes quantity, e.g. 16Gi
GENERATIVE = "podserve.dev/generative"  # "true" for token-generating models
KV_CACHE = "podserve.dev/kv-cache-size"  # KV cache at the serving caps, a quantity

GIB = Decimal(2) ** 30
MIB = Decimal(2) ** 20

_MIG_NAME = re.compile(r"(?:^|[-/.])(?:mig-)?(\d+)g\.(\d+)gb", re.IGNORECASE)
_SIZE_IN_NAME = re.compile(r"(\d+)\s*GB", re.IGNORECASE)
# GFD product or GKE accelerator names without the memory in them, nominal GB from NVIDIA's
# data sheets (GKE's `nvidia-tesla-a100` is the 40 GB A2 standard; providers.md §2). Karpenter
# reports 22888 MiB for A10G and L4: below the nominal 24, so these never over-report.
# Karpenter's bare `a100` is either p4d (40 GB) or p4de (80 GB): the smaller one counts, as
# when a selector allows several devices.
_KNOWN_GB = {
    "tesla-t4": 16, "nvidia-l4": 24, "l4": 24, "a10g": 24, "nvidia-a10": 24, "a10": 24,
    "l40s": 48, "nvidia-tesla-a100": 40, "a100": 40,
}  # fmt: skip
_KARPENTER_MEMORY = "karpenter.k8s.aws/instance-gpu-memory"
_GFD_MEMORY = "nvidia.com/gpu.memory"


def server_container(pod: PodView) -> Container | None:
    """The container that loads the model: the one with a GPU, else `server` /
    `kserve-container`, else the first."""
    containers = pod.containers()
    for ctr in containers:
        if any(is_gpu_resource(r) for r in ctr.resource_names()):
            return ctr
    for ctr in containers:
        if ctr.name in {"server", "kserve-container"}:
            return ctr
    return containers[0] if containers else None


def stored_spec(ctx: LintContext, pod: PodView) -> Mapping[str, Any]:
    """The `spec` of the ModelService podserve render stores in the ConfigMap the pod
    mounts (`modelservice.yaml`). Empty for pods podserve did not render."""
    names = {
        str((v.get("configMap") or {}).get("name")) for v in pod.volumes() if v.get("configMap")
    }
    for doc in ctx.of_kind("ConfigMap"):
        meta = doc.manifest.get("metadata") or {}
        text = (doc.manifest.get("data") or {}).get(c.SPEC_FILE)
        if meta.get("name") not in names or str(meta.get("namespace", "")) != pod.namespace:
            continue
        if not isinstance(text, str):
            continue
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError:
            return {}
        spec = loaded.get("spec") if isinstance(loaded, Mapping) else None
        return spec if isinstance(spec, Mapping) else {}
    return {}


def stored_model(ctx: LintContext, pod: PodView) -> Mapping[str, Any]:
    """The pod's `model` section of the stored ModelService: the canary's when the pod's
    model URI is the canary's. Empty for pods podserve did not render."""
    spec = stored_spec(ctx, pod)
    if not spec:
        return {}
    canary = spec.get("canary")
    models = [
        spec.get("model") or {},
        (canary.get("model") or {}) if isinstance(canary, Mapping) else {},
    ]
    uri = pod.annotations.get(c.MODEL_URI)
    for model in models:
        if isinstance(model, Mapping) and model.get("uri") == uri:
            return model
    return models[0] if isinstance(models[0], Mapping) else {}


def model_size_bytes(ctx: LintContext, pod: PodView) -> Decimal | None:
    """From the `podserve.dev/model-size` annotation, else the stored spec's sizeGi."""
    value = pod.annotations.get(MODEL_SIZE)
    if value:
        return quantity(value)
    size = stored_model(ctx, pod).get("sizeGi")
    return Decimal(str(size)) * GIB if isinstance(size, int | float) else None


def generative(ctx: LintContext, pod: PodView) -> bool:
    """From the `podserve.dev/generative` annotation, else the stored spec."""
    if pod.annotations.get(GENERATIVE, "").lower() == "true":
        return True
    return stored_model(ctx, pod).get("generative") is True


def _memory_from_name(name: str) -> Decimal | None:
    mig = _MIG_NAME.search(name)
    if mig:
        return Decimal(mig[2]) * GIB
    sized = _SIZE_IN_NAME.search(name)
    if sized:
        return Decimal(sized[1]) * GIB
    lowered = name.lower()
    for key, gb in _KNOWN_GB.items():
        if lowered.endswith(key):
            return Decimal(gb) * GIB
    return None


def required_labels(pod: PodView) -> dict[str, list[str]]:
    """Node label key → values a pod requires (nodeSelector, required affinity In)."""
    found: dict[str, list[str]] = {}
    for key, op, values, required in pod.node_terms():
        if required and op == "In":
            found.setdefault(key, []).extend(values)
    return found


def device_memory(pod: PodView, resource: str) -> tuple[Decimal, str] | None:
    """Memory of one device of `resource` on the nodes this pod can land on, and where
    the number came from; None when nothing names it. The smallest value wins when a
    selector allows several."""
    if "/mig-" in resource:
        size = _memory_from_name(resource)
        if size is not None:
            return size, f"MIG profile {resource}"
    candidates: list[tuple[Decimal, str]] = []
    for key, values in required_labels(pod).items():
        for value in values:
            if key in {_GFD_MEMORY, _KARPENTER_MEMORY} or key.endswith(".memory"):
                if value.isdigit():
                    candidates.append((Decimal(value) * MIB, f"{key}={value}"))
            elif key.endswith(".product") or key in {
                "cloud.google.com/gke-accelerator",
                "cloud.google.com/gke-gpu-partition-size",
                "karpenter.k8s.aws/instance-gpu-name",
            }:
                size = _memory_from_name(value)
                if size is not None:
                    candidates.append((size, f"{key}={value}"))
    return min(candidates) if candidates else None


def gpu_resources(ctr: Container) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in ctr.resource_names():
        if not is_gpu_resource(name):
            continue
        value = quantity(ctr.resource("limits", name) or ctr.resource("requests", name))
        if value is not None and value == value.to_integral_value():
            counts[name] = int(value)
    return counts


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    if not selector:
        return False
    return all(labels.get(str(k)) == str(v) for k, v in selector.items())


def services_for(ctx: LintContext, pod: PodView) -> list[Document]:
    """Services whose selector picks this pod's template labels."""
    return [
        doc
        for doc in ctx.of_kind("Service")
        if str((doc.manifest.get("metadata") or {}).get("namespace", "")) == pod.namespace
        and _selects((doc.manifest.get("spec") or {}).get("selector") or {}, pod.labels)
    ]


def service_account(ctx: LintContext, pod: PodView) -> Document | None:
    name = str(pod.pod.get("serviceAccountName") or pod.pod.get("serviceAccount") or "default")
    for doc in ctx.of_kind("ServiceAccount"):
        meta = doc.manifest.get("metadata") or {}
        if meta.get("name") == name and str(meta.get("namespace", "")) == pod.namespace:
            return doc
    return None


def args_of(ctr: Container) -> list[str]:
    return [str(a) for a in (ctr.spec.get("command") or []) + (ctr.spec.get("args") or [])]


def env_names(ctr: Container) -> set[str]:
    return {str(e.get("name")) for e in ctr.spec.get("env") or [] if isinstance(e, Mapping)}


def env_value(ctr: Container, name: str) -> str | None:
    for item in ctr.spec.get("env") or []:
        if isinstance(item, Mapping) and item.get("name") == name and "value" in item:
            return str(item["value"])
    return None


def flag_value(args: list[str], *flags: str) -> str | None:
    """`--flag value` or `--flag=value` in a command line."""
    for i, arg in enumerate(args):
        for flag in flags:
            if arg == flag and i + 1 < len(args):
                return args[i + 1]
            if arg.startswith(flag + "="):
                return arg.split("=", 1)[1]
    return None


def namespaces_of(ctx: LintContext) -> Iterator[str]:
    seen: set[str] = set()
    for pod in ctx.pods:
        if pod.namespace not in seen:
            seen.add(pod.namespace)
            yield pod.namespace
