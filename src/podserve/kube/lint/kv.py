"""What a generative pod's KV cache asks of its device: bytes per token, the context cap
and the concurrency cap, each from the pod itself where it says so, else from the
ModelService podserve render stores beside it.

Modelled on vLLM, the engine whose arithmetic the others share:
- per token, a key and a value vector per KV head per layer: 2 x layers x kv_heads x
  head_dim x dtype bytes (vllm/worker/cache_engine.py `CacheEngine.get_cache_block_size`);
- the engine takes `gpu_memory_utilization` of the device (default 0.9, vllm/engine/
  arg_utils.py `EngineArgs.gpu_memory_utilization`); weights and activation peaks come out
  of that, the KV cache gets the rest, and the rest of the device is left to the CUDA
  context, NCCL and the allocator;
- at start it refuses to serve when one request of `max_model_len` tokens does not fit the
  cache: "The model's max seq len (...) is larger than the maximum number of tokens that can
  be stored in KV cache" (vllm/worker/worker.py `raise_if_cache_size_invalid`), in v1 "To
  serve at least one request with the models's max seq len (...), (... GiB KV cache is
  needed, which is larger than the available KV cache memory" (vllm/v1/core/kv_cache_utils.py
  `check_enough_kv_cache_memory`);
- with room for fewer than `max_num_seqs` full-length sequences it starts, and preempts
  (recomputes) running sequences when the cache fills (vllm/v1/core/sched/scheduler.py).
Activation peaks are not modelled: the usable fraction stands in for them, so a spec at the
edge may pass here and still need a lower `gpu_memory_utilization` in practice."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from podserve.config.service_pod import KV_DTYPE_BYTES
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.pods import Container, PodView, quantity
from podserve.kube.lint.signals import args_of, env_value, flag_value, stored_model, stored_spec

# vLLM's default `gpu_memory_utilization`: the share of a device the rules count as usable.
USABLE_FRACTION = Decimal("0.9")

KV_BYTES_PER_TOKEN = "podserve.dev/kv-cache-bytes-per-token"  # an integer, for any pod

# (env names, flags) per cap, each server's own spelling: podserve's settings; vLLM
# `--max-num-seqs` / `--max-model-len`; TGI `--max-concurrent-requests` /
# `--max-total-tokens` and their env forms; SGLang `--max-running-requests` /
# `--context-length` (the same names generative-no-caps looks for).
_SEQUENCES = (
    ("PODSERVE_MAX_CONCURRENT_SEQUENCES", "MAX_CONCURRENT_REQUESTS"),
    ("--max-num-seqs", "--max-concurrent-requests", "--max-running-requests"),
)
_CONTEXT = (
    ("PODSERVE_MAX_CONTEXT_TOKENS", "MAX_TOTAL_TOKENS"),
    ("--max-model-len", "--max-total-tokens", "--context-length"),
)


@dataclass(frozen=True, slots=True)
class KvDemand:
    """The KV cache a pod's caps imply; a field is None when nothing says it."""

    bytes_per_token: int | None
    context_tokens: int | None
    sequences: int | None

    def one_sequence_bytes(self) -> Decimal | None:
        if self.bytes_per_token is None or self.context_tokens is None:
            return None
        return Decimal(self.bytes_per_token) * self.context_tokens

    def full_batch_bytes(self) -> Decimal | None:
        one = self.one_sequence_bytes()
        return None if one is None or self.sequences is None else one * self.sequences


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value > 0 else None
    if isinstance(value, str) and value.strip().isdigit():
        number = int(value.strip())
        return number if number > 0 else None
    return None


def bytes_per_token_of(model: Mapping[str, Any]) -> int | None:
    """From a stored spec's `model`: `architecture` (computed) or `kvCacheBytesPerToken`."""
    arch = model.get("architecture")
    if isinstance(arch, Mapping):
        dims = [_positive_int(arch.get(k)) for k in ("layers", "kvHeads", "headDim")]
        dtype_bytes = KV_DTYPE_BYTES.get(str(arch.get("kvCacheDtype", "bfloat16")))
        if dtype_bytes is not None and all(d is not None for d in dims):
            layers, heads, head_dim = (d for d in dims if d is not None)
            return 2 * layers * heads * head_dim * dtype_bytes
    return _positive_int(model.get("kvCacheBytesPerToken"))


def _cap(ctr: Container, names: tuple[tuple[str, ...], tuple[str, ...]]) -> int | None:
    env_names, flags = names
    for name in env_names:
        found = _positive_int(env_value(ctr, name))
        if found is not None:
            return found
    return _positive_int(flag_value(args_of(ctr), *flags))


def kv_demand(ctx: LintContext, pod: PodView, ctr: Container) -> KvDemand:
    model = stored_model(ctx, pod)  # the canary's own when this is the canary's pod
    serving = stored_spec(ctx, pod).get("serving")
    serving = serving if isinstance(serving, Mapping) else {}
    per_token = _positive_int(pod.annotations.get(KV_BYTES_PER_TOKEN))
    if per_token is None:
        per_token = bytes_per_token_of(model)
    context = _cap(ctr, _CONTEXT) or _positive_int(serving.get("maxContextTokens"))
    sequences = _cap(ctr, _SEQUENCES) or _positive_int(serving.get("maxConcurrentSequences"))
    return KvDemand(per_token, context, sequences)


def annotated_kv_bytes(pod: PodView, key: str) -> Decimal | None:
    raw = pod.annotations.get(key)
    return quantity(raw) if raw else None
