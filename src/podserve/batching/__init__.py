"""Pure dynamic-batching policy (Triton semantics): no I/O, no threads, an injected clock."""

from podserve.batching.policy import BatchPolicy, BatchPolicyConfig

__all__ = ["BatchPolicy", "BatchPolicyConfig"]
