"""`ModelService` sections about the pod itself: model source, image, replicas, GPUs,
resources, serving limits, rollout, disruption, spread, cache and capacity type."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from podserve.config.service_base import (
    _DIGEST,
    _DNS_LABEL,
    Quantity,
    _Spec,
    quantity_value,
)
from podserve.config.service_gpu import Provider


class Metadata(_Spec):
    name: str = Field(
        max_length=40,
        pattern=_DNS_LABEL,
        description="Name of the service; every object is named from it (suffixes such as "
        "`-canary` are added, hence at most 40 characters).",
    )
    namespace: str = Field("default", pattern=_DNS_LABEL, description="Target namespace.")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Extra labels put on every rendered object."
    )


# Bytes per element of the KV cache dtypes the engines accept (vLLM `--kv-cache-dtype`:
# auto/bfloat16/float16/fp8/fp8_e4m3/fp8_e5m2, vllm/config/cache.py; TGI and SGLang name the
# same ones). "auto" is left out on purpose: it means "the model's dtype", which the spec
# does not know, so the author writes it.
KV_DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "int8": 1,
}
KvCacheDtype = Literal["float32", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "int8"]


class Architecture(_Spec):
    """What the KV cache of one token costs, from the model's `config.json`."""

    layers: int = Field(
        ge=1, le=1000, description="Decoder layers holding a KV cache (`num_hidden_layers`)."
    )
    kv_heads: int = Field(
        ge=1,
        le=1024,
        description="Key/value heads per layer (`num_key_value_heads`; "
        "`num_attention_heads` when the config has none, i.e. no grouped-query attention).",
    )
    head_dim: int = Field(
        ge=1,
        le=4096,
        description="Size of one head (`head_dim`, else `hidden_size / num_attention_heads`).",
    )
    kv_cache_dtype: KvCacheDtype = Field(
        "bfloat16",
        description="Element type of the cache (vLLM `--kv-cache-dtype`; the model's dtype "
        "unless the engine is told otherwise).",
    )

    @property
    def kv_bytes_per_token(self) -> int:
        # A key and a value vector per KV head per layer: vLLM sizes a cache block the same
        # way (vllm/worker/cache_engine.py CacheEngine.get_cache_block_size:
        # 2 x num_layers x num_kv_heads x head_size x dtype size). Layers with a sliding
        # window are counted at full context, an upper bound.
        return 2 * self.layers * self.kv_heads * self.head_dim * KV_DTYPE_BYTES[self.kv_cache_dtype]


class ModelSource(_Spec):
    name: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9][-A-Za-z0-9_.]*$",
        description="Model name clients use (`/v2/models/{name}`); default: metadata.name.",
    )
    uri: str = Field(
        min_length=1,
        description="Where the weights live: `s3://`, `hf://org/name@rev`, `https://`, `file://`.",
    )
    digest: str = Field(
        pattern=_DIGEST,
        description="`sha256:<hex>` the fetcher verifies; a model is never served unpinned.",
    )
    runtime: str = Field(
        min_length=1,
        description="podserve runtime (`sklearn`, `onnx`, `torch`, `transformers`, ...).",
    )
    load_seconds: float = Field(
        gt=0,
        le=86400,
        description="Observed time from container start to /startup = 200 (the server logs and "
        "exports it). Sets the startup-probe budget (x 1.5) and the scale-down window.",
    )
    size_gi: float | None = Field(
        None, gt=0, description="Size of the weights in GiB; sizes a cache PVC."
    )
    generative: bool = Field(
        False,
        description="Token-generating model: enables TTFT alerts and the ttft-p95 metric.",
    )
    public: bool = Field(
        False,
        description="The source needs no credentials (a public repository, bucket or URL): "
        "says so to `podserve lint` (fetch-without-credentials) instead of a Secret.",
    )
    kv_cache_bytes_per_token: int | None = Field(
        None,
        ge=1,
        description="KV cache bytes one token holds, when `architecture` cannot say it "
        "(multi-head latent attention, mixed layer types). With the serving caps it lets "
        "`podserve lint` check that weights and KV cache fit the device.",
    )
    architecture: Architecture | None = Field(
        None,
        description="Layers, KV heads, head size and cache dtype (from config.json): the KV "
        "cache per token is 2 x layers x kvHeads x headDim x dtype bytes.",
    )

    @model_validator(mode="after")
    def _one_kv_size(self) -> ModelSource:
        if self.kv_cache_bytes_per_token is not None and self.architecture is not None:
            raise ValueError(
                "model.kvCacheBytesPerToken and model.architecture both size the KV cache: give one"
            )
        return self

    @property
    def kv_bytes_per_token(self) -> int | None:
        if self.architecture is not None:
            return self.architecture.kv_bytes_per_token
        return self.kv_cache_bytes_per_token


class Image(_Spec):
    repository: str = Field("ghcr.io/podserve/podserve", description="Server image repository.")
    tag: str = Field(
        "0.1.0", pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$", description="Image tag."
    )
    digest: str | None = Field(
        None, pattern=_DIGEST, description="Pin the image by digest (recommended)."
    )
    pull_policy: Literal["IfNotPresent", "Always", "Never"] = Field(
        "IfNotPresent", description="imagePullPolicy."
    )

    @property
    def ref(self) -> str:
        base = f"{self.repository}:{self.tag}"
        return f"{base}@{self.digest}" if self.digest else base


class Replicas(_Spec):
    min: int = Field(1, ge=0, le=1000, description="Fewest replicas (0 = scale to zero, KEDA).")
    max: int = Field(1, ge=1, le=1000, description="Most replicas the autoscaler may create.")

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"replicas.min {self.min} is above replicas.max {self.max}")
        return self


class Resources(_Spec):
    cpu: Quantity = Field("2", description="CPU request.")
    cpu_limit: Quantity | None = Field(
        None, description="CPU limit, above the request (default: twice the request)."
    )
    memory: Quantity = Field(
        "8Gi",
        description="Host memory for the process (weights load through it). The memory "
        "request and limit are this plus `shm`, because /dev/shm counts against the limit.",
    )
    shm: Quantity = Field(
        "1Gi", description="Size of /dev/shm (a Memory emptyDir with this sizeLimit)."
    )

    @model_validator(mode="after")
    def _limits(self) -> Resources:
        if self.cpu_limit is not None and quantity_value(self.cpu_limit) <= quantity_value(
            self.cpu
        ):
            raise ValueError("resources.cpuLimit must be above resources.cpu")
        if quantity_value(self.shm) <= 0:
            raise ValueError("resources.shm must be positive")
        return self


class Serving(_Spec):
    max_queue: int = Field(256, ge=1, description="Queued requests per model before 503.")
    max_concurrent_sequences: int | None = Field(
        None, ge=1, description="Sequences decoded at once (generative models)."
    )
    max_context_tokens: int | None = Field(
        None, ge=1, description="Longest prompt + max_tokens accepted (generative models)."
    )
    longest_request_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Longest request the service allows; the drain and grace period cover it.",
    )


class Rollout(_Spec):
    strategy: Literal["RollingUpdate", "Recreate"] = Field(
        "RollingUpdate", description="Deployment strategy."
    )
    spare_gpu: bool | None = Field(
        None,
        description="A spare GPU exists for a surge pod (maxSurge 1, maxUnavailable 0); "
        "otherwise maxSurge 0, maxUnavailable 1. Default: true when headroom pods are rendered.",
    )


class Disruption(_Spec):
    min_available: int | None = Field(
        None, ge=0, description="PDB minAvailable; must stay below replicas.min."
    )
    max_unavailable: int | str | None = Field(
        None,
        description="PDB maxUnavailable: a count or a percentage such as `25%` (default 1). "
        "It holds at any scale, where minAvailable = min - 1 would let a drain take all "
        "but one pod of a service scaled out far above its minimum.",
    )

    @model_validator(mode="after")
    def _one(self) -> Disruption:
        if self.min_available is not None and self.max_unavailable is not None:
            raise ValueError("disruption takes minAvailable or maxUnavailable, not both")
        given = self.max_unavailable
        if isinstance(given, int) and given < 1:
            raise ValueError("disruption.maxUnavailable must be at least 1, or no drain ends")
        if isinstance(given, str) and not re.match(r"^([1-9][0-9]?|100)%$", given):
            raise ValueError(f"disruption.maxUnavailable {given!r} is not a count or 1%..100%")
        return self


class Spread(_Spec):
    nodes: bool = Field(True, description="Spread replicas across nodes (hostname).")
    zones: bool = Field(False, description="Also spread across zones.")
    hard: bool | None = Field(
        None,
        description="DoNotSchedule (with matchLabelKeys [pod-template-hash], so a rollout's "
        "old pods do not count against the new ones) instead of ScheduleAnyway. Default: "
        "required when the workload keeps 2 or more replicas, since a soft spread lets the "
        "scheduler pack them on one node; set false to opt out where GPU nodes are fewer "
        "than replicas.",
    )


class Cache(_Spec):
    kind: Literal["hostPath", "pvc", "emptyDir"] = Field(
        "hostPath",
        description="hostPath: shared per node (fetch once per node); pvc: a claim "
        "(ReadWriteMany for a Deployment, one per replica for a StatefulSet); emptyDir: "
        "download at every start.",
    )
    host_path: str = Field(
        "/var/cache/podserve",
        pattern=r"^/",
        description="Node directory for hostPath; each namespace gets its own "
        "sub-directory (`<hostPath>/<namespace>`), and a pinned cache hit there is re-hashed "
        "before it is served, since any pod that mounts the node path can write to it.",
    )
    claim_name: str | None = Field(None, description="Existing claim (kind pvc, Deployment).")
    read_write_many: bool = Field(
        False, description="The claim is ReadWriteMany (required to share it across pods)."
    )
    storage_class: str | None = Field(None, description="StorageClass of per-replica claims.")
    size: Quantity | None = Field(None, description="Size of emptyDir or per-replica claims.")
    max_size: Quantity | None = Field(
        None,
        description="Cap passed to the fetch (`--cache-max-bytes`): least-recently-used "
        "entries not in use are evicted above it. Default: `size` for emptyDir and claims, "
        "100Gi for hostPath (the node's disk is shared by every pod on it).",
    )


class CapacityType(StrEnum):
    ON_DEMAND = "on-demand"
    SPOT = "spot"


class Capacity(_Spec):
    provider: Provider = Field(
        "karpenter",
        description="Who runs the nodes: `gke`, `eks` (managed node groups), `karpenter` "
        "(on AWS), `aks`, or `generic` (any cluster running the NVIDIA GPU Operator). Sets "
        "the GPU node labels and taints, the spot node label and the reclaim notice.",
    )
    serving: CapacityType = Field(
        CapacityType.ON_DEMAND,
        description="on-demand: serving prefers on-demand nodes; spot: serving may run on "
        "spot nodes (the grace period must fit the reclaim notice).",
    )
