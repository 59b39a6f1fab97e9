"""Spot/preemptible node pools per provider: the node label that marks them, the taint some
providers put on them, and how much notice a reclaim gives (the grace period must fit in
it, or the kubelet's SIGKILL comes from the provider instead).

Notices, as the pods see them:
- AWS spot: 2 minutes (EC2 spot instance interruption notice; Karpenter
  website/content/en/docs/concepts/disruption.md).
- GKE spot / preemptible: the VM gets 30 s, but kubelet graceful node shutdown gives
  ordinary pods only the first 15 s and keeps the last 15 s for system-critical pods, so a
  terminationGracePeriodSeconds above 15 has no effect
  (cloud.google.com/kubernetes-engine/docs/concepts/spot-vms, "Termination and graceful
  shutdown of Spot VMs"; how-to/preemptible-vms). Autopilot Spot Pods get 25 s.
- Azure spot: Scheduled Events `Preempt` with at least 30 s
  (learn.microsoft.com/azure/virtual-machines/linux/scheduled-events).
A `generic` cluster has no provider spot label, so it has no spot pool."""

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
    "gke": SpotPool("gke", "cloud.google.com/gke-spot", "true", "cloud.google.com/gke-spot", 15),
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
# GKE's legacy preemptible VMs use their own label; ordinary pods get the same 15 s.
EXTRA_SPOT_LABELS = {"cloud.google.com/gke-preemptible": ("true", 15)}


def spot_pool(provider: str) -> SpotPool | None:
    """The spot pool of a provider, or None where the provider labels no spot nodes."""
    return SPOT_POOLS.get(provider)


def spot_notice_for_label(key: str, value: str) -> int | None:
    """Reclaim notice of the pool a node label/value selects, or None if it is not spot."""
    for pool in SPOT_POOLS.values():
        if pool.label == key and pool.value == value:
            return pool.reclaim_notice_s
    extra = EXTRA_SPOT_LABELS.get(key)
    if extra is not None and extra[0] == value:
        return extra[1]
    return None
