"""A share of the process's file descriptors for one kind of resource."""

from __future__ import annotations

import resource


def within_descriptor_share(cap: int) -> int:
    """`cap`, or a quarter of the soft RLIMIT_NOFILE when that is lower (at least 1): a
    resource a client can open many of (shared-memory regions, gRPC connections) must
    leave the rest of the descriptors to everything else, REST connections and model
    files included."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return cap
    return max(1, min(cap, soft // 4))
