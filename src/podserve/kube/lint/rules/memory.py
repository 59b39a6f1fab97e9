"""Memory against the model: host RAM while the weights load, device memory while they
serve. The size comes from the `podserve.dev/model-size` annotation (add it to any model pod
by hand) or the `model.sizeGi` of the ModelService podserve render stores, the device from
the node labels the pod selects or the MIG profile it requests (lint/signals.py)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import quantity
from podserve.kube.lint.signals import (
    GIB,
    KV_CACHE,
    MODEL_SIZE,
    device_memory,
    gpu_resources,
    model_size_bytes,
    server_container,
)
from podserve.kube.types import Severity

# The server process itself before any weights. Measured: 257 MiB max RSS for podserve's
# server with torch, transformers and tokenizers imported (CPU build; `python -c "import
# torch, transformers, tokenizers, podserve.server.app"` + getrusage, 2026-12-01). A CUDA
# context maps the CUDA libraries into host memory on top (not measurable here, no GPU);
# 2 GiB leaves room for both plus tokenizer state and request buffers.
STEADY_STATE_BYTES = 2 * GIB


def _gib(value: Decimal) -> str:
    return f"{value / GIB:.1f}Gi"


def _memory_below(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        size = model_size_bytes(ctx, pod)
        ctr = server_container(pod)
        if size is None or ctr is None:
            continue
        raw = ctr.resource("limits", "memory") or ctr.resource("requests", "memory")
        memory = quantity(raw) if raw is not None else None
        if memory is None:
            continue
        needed = size + STEADY_STATE_BYTES
        if memory < needed:
            yield Hit(
                pod.document,
                f"{ctr.path}.resources.limits.memory",
                f"memory {raw} cannot hold the {_gib(size)} weights while they load plus "
                f"~{_gib(STEADY_STATE_BYTES)} for the process (needs ≥ {_gib(needed)})",
            )


MEMORY_BELOW_MODEL_SIZE = Rule(
    id="memory-below-model-size",
    severity=Severity.ERROR,
    title="Host memory cannot hold the weights while they load",
    why="Weights pass through host RAM on their way to the GPU (read, deserialised, often "
    "converted) before the server's steady state even starts; a container whose memory limit "
    "is below the weights plus the process's own footprint is OOM-killed during every load "
    "and crash-loops, each attempt burning the full load time on an expensive node. Page "
    f"cache of memory-mapped files counts against the cgroup too. The size comes from the "
    f"{MODEL_SIZE} annotation or the sizeGi of the ModelService podserve render stores.",
    fix="Raise resources.memory (request = limit) to at least the model size plus ~2Gi "
    "(plus /dev/shm, which counts against the same limit).",
    check=_memory_below,
)


def _exceeds_device(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        size = model_size_bytes(ctx, pod)
        ctr = server_container(pod)
        if size is None or ctr is None:
            continue
        kv_raw = pod.annotations.get(KV_CACHE)
        kv = (quantity(kv_raw) if kv_raw else None) or Decimal(0)
        for resource, count in sorted(gpu_resources(ctr).items()):
            found = device_memory(pod, resource)
            if found is None or count < 1:
                continue
            per_device, origin = found
            total = per_device * count
            needed = size + kv
            if needed > total:
                shown = f"{_gib(size)} weights" + (f" + {_gib(kv)} KV cache" if kv else "")
                yield Hit(
                    pod.document,
                    f"{ctr.path}.resources.limits.{resource}",
                    f"{shown} exceed {count} x {_gib(per_device)} of device memory ({origin})",
                )


MODEL_EXCEEDS_DEVICE = Rule(
    id="model-exceeds-device",
    severity=Severity.ERROR,
    title="Weights and KV cache do not fit the GPU or MIG slice",
    why="A model whose weights (plus the KV cache its concurrency and context caps need) "
    "exceed the memory of the devices the pod gets fails with CUDA out-of-memory at load or "
    "at the first full batch, on every replica. A MIG slice has only its profile's memory "
    "(1g.10gb: 10 GB) whatever the GPU has; the memory comes from the profile name, GFD's "
    "nvidia.com/gpu.memory, Karpenter's instance-gpu-memory, or the product name; the size "
    f"from the {MODEL_SIZE} annotation or the stored ModelService's sizeGi, the KV cache from "
    f"{KV_CACHE}.",
    fix="Request a larger MIG profile or GPU, more devices with tensor parallelism, a "
    "quantised model, or lower the concurrency and context caps.",
    check=_exceeds_device,
)
