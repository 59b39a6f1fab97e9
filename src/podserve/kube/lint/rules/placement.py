"""Placement: the GPU taint toleration, a real node selector beside it, and spread."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube import conventions as c
from podserve.kube.capacity import SPOT_POOLS
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity

_GPU_TAINT_KEYS = {"nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915", "gpu"}
_SPOT_TAINT_KEYS = {p.taint_key for p in SPOT_POOLS.values() if p.taint_key}


def _tolerates_gpu(tolerations: list[dict[str, object]] | list[object]) -> bool:
    for item in tolerations:
        if not isinstance(item, dict):
            continue
        key = str(item.get("key", ""))
        if item.get("operator") == "Exists" and not key:
            return True  # tolerates everything
        if key in _GPU_TAINT_KEYS or "gpu" in key:
            return True
    return False


def _no_toleration(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if pod.gpu and not _tolerates_gpu([dict(t) for t in pod.tolerations()]):
            yield Hit(
                pod.document,
                f"{pod.pod_path}.tolerations",
                "GPU pod has no toleration for the GPU nodes' taint",
            )


GPU_NO_TOLERATION = Rule(
    id="gpu-no-toleration",
    severity=Severity.WARNING,
    title="GPU pod without a toleration for the GPU taint",
    why="GPU node pools are usually tainted (GKE adds nvidia.com/gpu=present:NoSchedule) so "
    "that ordinary pods stay off expensive nodes. Unless the ExtendedResourceToleration "
    "admission plugin is on, a GPU pod without the toleration stays Pending with `had "
    "untolerated taint`.",
    fix="Add `tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]`.",
    check=_no_toleration,
)


def _toleration_without_selector(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        tolerated = [
            str(t.get("key"))
            for t in pod.tolerations()
            if t.get("key")
            and str(t.get("key")) not in _SPOT_TAINT_KEYS
            and t.get("effect") != "NoExecute"
        ]
        if not tolerated:
            continue
        required = [term for term in pod.node_terms() if term[3] and term[1] in {"In", "Exists"}]
        if not required:
            yield Hit(
                pod.document,
                f"{pod.pod_path}.nodeSelector",
                f"tolerates {', '.join(tolerated)} but selects no node label: a "
                "toleration permits a node, it does not attract the pod to one",
            )


TOLERATION_WITHOUT_SELECTOR = Rule(
    id="toleration-without-selector",
    severity=Severity.WARNING,
    title="Toleration without a node selector or required affinity",
    why="A toleration only allows scheduling onto tainted nodes; it does not require them. "
    "A GPU pod can then land on a node of the wrong GPU model (or a CPU pod on a GPU node, "
    "holding it from GPU work); the scheduler needs a label to aim at.",
    fix="Add a nodeSelector (or required node affinity) on a real label, e.g. "
    '`nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB` or `nvidia.com/gpu.present: "true"`.',
    check=_toleration_without_selector,
)


def _spread(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.served or ctx.min_replicas(pod) < 2:
            continue
        spread = [
            str(t.get("topologyKey"))
            for t in pod.pod.get("topologySpreadConstraints") or []
            if isinstance(t, dict)
        ]
        anti = (pod.pod.get("affinity") or {}).get("podAntiAffinity") or {}
        anti_keys = [
            str(t.get("topologyKey"))
            for t in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        ]
        anti_keys += [
            str((t.get("podAffinityTerm") or {}).get("topologyKey"))
            for t in anti.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        ]
        if c.HOSTNAME_KEY not in spread + anti_keys:
            yield Hit(
                pod.document,
                f"{pod.pod_path}.topologySpreadConstraints",
                f"{ctx.min_replicas(pod)} replicas may all land on one node",
            )


NO_SPREAD = Rule(
    id="no-spread",
    severity=Severity.WARNING,
    title="Replicas not spread across nodes",
    why="GPU nodes fail, get drained and get reclaimed one at a time; replicas packed on one "
    "node turn a single node event into a full outage, and the PDB cannot help because all "
    "of them go at once.",
    fix="Add a topologySpreadConstraint on kubernetes.io/hostname (maxSkew 1) or a pod "
    "anti-affinity on the same key; add topology.kubernetes.io/zone for zonal outages.",
    check=_spread,
)


def _soft_only(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.served or ctx.min_replicas(pod) < 2:
            continue
        hostname = [
            t
            for t in pod.pod.get("topologySpreadConstraints") or []
            if isinstance(t, dict) and t.get("topologyKey") == c.HOSTNAME_KEY
        ]
        anti = (pod.pod.get("affinity") or {}).get("podAntiAffinity") or {}
        hard_anti = any(
            t.get("topologyKey") == c.HOSTNAME_KEY
            for t in anti.get("requiredDuringSchedulingIgnoredDuringExecution") or []
        )
        hard_spread = any(t.get("whenUnsatisfiable") == "DoNotSchedule" for t in hostname)
        soft = hostname or anti.get("preferredDuringSchedulingIgnoredDuringExecution")
        if soft and not hard_spread and not hard_anti:
            yield Hit(
                pod.document,
                f"{pod.pod_path}.topologySpreadConstraints",
                f"{ctx.min_replicas(pod)} replicas are spread across nodes only as a "
                "preference (ScheduleAnyway)",
            )


SOFT_SPREAD_ONLY = Rule(
    id="soft-spread-only",
    severity=Severity.WARNING,
    title="Replicas spread across nodes only as a preference",
    why="`whenUnsatisfiable: ScheduleAnyway` (or preferred anti-affinity) is only a scoring "
    "hint: when the autoscaler adds one GPU node for several pending pods, or a surge lands "
    "while other nodes are full, the scheduler packs replicas onto one node and a single "
    "node failure or drain takes them all. With min ≥ 2 the spread must be required.",
    fix="Use `whenUnsatisfiable: DoNotSchedule` on kubernetes.io/hostname with "
    "`matchLabelKeys: [pod-template-hash]` (so a rollout's old and new pods are counted "
    "apart), or a required pod anti-affinity on the hostname.",
    check=_soft_only,
)
