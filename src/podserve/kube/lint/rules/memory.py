"""Memory against the model: host RAM while the weights load, device memory while they
serve. The size comes from the `podserve.dev/model-size` annotation (add it to any model pod
by hand) or the `model.sizeGi` of the ModelService podserve render stores, the device from
the node labels the pod selects or the MIG profile it requests (lint/signals.py), the KV
cache from bytes per token and the serving caps (lint/kv.py)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from decimal import Decimal

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.kv import (
    KV_BYTES_PER_TOKEN,
    USABLE_FRACTION,
    KvDemand,
    annotated_kv_bytes,
    kv_demand,
)
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import PodView, quantity
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
USABLE_PERCENT = f"{USABLE_FRACTION:.0%}"


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


@dataclass(frozen=True, slots=True)
class _Budget:
    """One GPU resource of a model pod against what the model needs on it."""

    pod: PodView
    field: str
    weights: Decimal
    usable: Decimal
    device: str  # "1 x 10.0Gi (MIG profile nvidia.com/mig-1g.10gb)"
    demand: KvDemand
    annotated_kv: Decimal | None  # podserve.dev/kv-cache-size: KV at the caps


def _budgets(ctx: LintContext) -> Iterator[_Budget]:
    for pod in ctx.pods:
        size = model_size_bytes(ctx, pod)
        ctr = server_container(pod)
        if size is None or ctr is None:
            continue
        demand = kv_demand(ctx, pod, ctr)
        for resource, count in sorted(gpu_resources(ctr).items()):
            found = device_memory(pod, resource)
            if found is None or count < 1:
                continue
            per_device, origin = found
            yield _Budget(
                pod,
                f"{ctr.path}.resources.limits.{resource}",
                size,
                per_device * count * USABLE_FRACTION,
                f"{count} x {_gib(per_device)} ({origin})",
                demand,
                annotated_kv_bytes(pod, KV_CACHE),
            )


def _usable(budget: _Budget) -> str:
    return f"the {_gib(budget.usable)} usable ({USABLE_PERCENT}) of {budget.device}"


def _exceeds_device(ctx: LintContext) -> Iterator[Hit]:
    for budget in _budgets(ctx):
        one = budget.demand.one_sequence_bytes() or Decimal(0)
        if budget.weights + one <= budget.usable:
            continue
        shown = f"{_gib(budget.weights)} weights"
        if one:
            shown += (
                f" + {_gib(one)} KV cache for one {budget.demand.context_tokens}-token sequence"
            )
        yield Hit(budget.pod.document, budget.field, f"{shown} exceed {_usable(budget)}")


_FRACTION_WHY = (
    f"Only {USABLE_PERCENT} of a device counts as usable: the CUDA context, NCCL buffers, "
    "activation peaks and allocator fragmentation take the rest, which is why vLLM's "
    "gpu_memory_utilization defaults to 0.9."
)

MODEL_EXCEEDS_DEVICE = Rule(
    id="model-exceeds-device",
    severity=Severity.ERROR,
    title="Weights and one full-length sequence's KV cache do not fit the GPU or MIG slice",
    why="A model whose weights exceed the memory of the devices the pod gets fails with CUDA "
    "out-of-memory at load, on every replica; one whose weights leave no room for the KV "
    "cache of a single request at the context cap cannot serve that request, and vLLM "
    'refuses to start ("max seq len ... is larger than the maximum number of tokens that '
    "can be stored in KV cache\"). A MIG slice has only its profile's memory (1g.10gb: "
    "10 GB) whatever the GPU has; the memory comes from the profile name, GFD's "
    "nvidia.com/gpu.memory, Karpenter's instance-gpu-memory, or the product name. "
    f"{_FRACTION_WHY} The weights come from the {MODEL_SIZE} annotation or the stored "
    "ModelService's sizeGi; KV bytes per token from its model.architecture (2 x layers x "
    "kvHeads x headDim x dtype bytes) or model.kvCacheBytesPerToken, or the "
    f"{KV_BYTES_PER_TOKEN} annotation; the context cap from the server's flags or env "
    "(--max-model-len, PODSERVE_MAX_CONTEXT_TOKENS) or serving.maxContextTokens.",
    fix="Request a larger MIG profile or GPU, more devices with tensor parallelism, a "
    "quantised model or KV cache (fp8), or lower the context cap.",
    check=_exceeds_device,
)


def _below_concurrency(ctx: LintContext) -> Iterator[Hit]:
    for budget in _budgets(ctx):
        demand = budget.demand
        one = demand.one_sequence_bytes()
        full = demand.full_batch_bytes()
        if one is None or full is None:
            # Without bytes per token, the annotation's KV-at-the-caps figure stands in.
            full = budget.annotated_kv
            if full is None:
                continue
        elif budget.weights + one > budget.usable:
            continue  # model-exceeds-device already reports it: not even one fits
        if budget.weights + full <= budget.usable:
            continue
        if one is not None and demand.sequences is not None:
            room = int((budget.usable - budget.weights) / one)
            shown = (
                f"{_gib(budget.weights)} weights + {_gib(full)} KV cache for "
                f"{demand.sequences} x {demand.context_tokens} tokens exceed {_usable(budget)}"
                f": {room} full-length sequence(s) fit"
            )
        else:
            shown = (
                f"{_gib(budget.weights)} weights + {_gib(full)} KV cache ({KV_CACHE}) exceed "
                f"{_usable(budget)}"
            )
        yield Hit(budget.pod.document, budget.field, shown)


KV_CACHE_BELOW_CONCURRENCY = Rule(
    id="kv-cache-below-concurrency",
    severity=Severity.WARNING,
    title="The KV cache cannot hold the concurrency cap's sequences at full length",
    why="The concurrency cap promises that many sequences decoding at once; when the weights "
    "leave room for fewer full-length ones, the server starts and serves, but at a full "
    "batch of long requests the cache runs out: vLLM preempts running sequences and "
    "recomputes them (latency spikes, throughput collapses), engines without paging run "
    "out of memory. Admission should refuse before the cache does. "
    f"{_FRACTION_WHY} Needs the KV bytes per token and the context cap that "
    "model-exceeds-device reads, plus the concurrency cap (--max-num-seqs, "
    "PODSERVE_MAX_CONCURRENT_SEQUENCES or serving.maxConcurrentSequences); or the KV cache "
    f"at the caps from the {KV_CACHE} annotation.",
    fix="Lower the concurrency cap to the sequences that fit (the message says how many), "
    "lower the context cap, use an fp8 KV cache or a quantised model, or request a larger "
    "MIG profile or GPU.",
    check=_below_concurrency,
)
