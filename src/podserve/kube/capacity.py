"""Spot/preemptible node pools per provider: the node label that marks them, the taint some
providers put on them, and how much notice a reclaim gives (the grace period must fit in
it, or the kubelet's SIGKILL comes from the provider instead).

Notices: AWS spot 2 minutes; GCP spot/preemptible 30 s; Azure spot 30 s (provider docs,
not re-checked against a cluster here)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SpotPool:
    provider: str
    label: str
    value: str
    taint_key: str | None
    reclaim_notice_s: int


SPOT_POOLS: dict[str, SpotPool] = {
    "gke": SpotPool("gke", "cloud.google.com/gke-spot", "true", "cloud.google.com/gke-spot", 30),
    "eks": SpotPool("eks", "eks.amazonaws.com/capacityType", "SPOT", None, 120),
    "karpenter": SpotPool("karpenter", "karpenter.sh/capacity-type", "spot", None, 120),
    "aks": SpotPool(
        "aks",
        "kubernetes.azure.com/scalesetpriority",
        "spot",
        "kubernetes.azure.com/scalesetpriority",
        30,
    ),
}
# GKE's legacy preemptible VMs use their own label; the notice is the same 30 s.
EXTRA_SPOT_LABELS = {"cloud.google.com/gke-preemptible": ("true", 30)}


def spot_notice_for_label(key: str, value: str) -> int | None:
    """Reclaim notice of the pool a node label/value selects, or None if it is not spot."""
    for pool in SPOT_POOLS.values():
        if pool.label == key and pool.value == value:
            return pool.reclaim_notice_s
    extra = EXTRA_SPOT_LABELS.get(key)
    if extra is not None and extra[0] == value:
        return extra[1]
    return None
