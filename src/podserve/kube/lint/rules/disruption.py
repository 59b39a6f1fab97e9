"""PodDisruptionBudgets: present for replicated serving, and never blocking every eviction
(kubernetes-semantics.md §4)."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity


def _no_pdb(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if pod.kind not in {"Deployment", "StatefulSet"}:
            continue
        replicas = ctx.min_replicas(pod)
        if replicas >= 2 and not ctx.pdbs_for(pod):
            yield Hit(
                pod.document,
                "metadata",
                f"{replicas} replicas and no PodDisruptionBudget selects them",
            )


NO_PDB = Rule(
    id="no-pdb",
    severity=Severity.WARNING,
    title="Replicated serving workload without a PodDisruptionBudget",
    why="A node drain (upgrade, autoscaler consolidation) may evict every replica at once; "
    "each then needs minutes to load elsewhere. A PDB makes voluntary evictions wait until "
    "a replacement is ready.",
    fix="Add a PodDisruptionBudget selecting the pods with minAvailable = replicas - 1 (or "
    "maxUnavailable: 1) and unhealthyPodEvictionPolicy: AlwaysAllow.",
    check=_no_pdb,
)


def _percent(value: object) -> int | None:
    text = str(value)
    return int(text[:-1]) if text.endswith("%") and text[:-1].isdigit() else None


def _blocks(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("PodDisruptionBudget"):
        spec = doc.manifest.get("spec") or {}
        if "maxUnavailable" in spec:
            value = spec["maxUnavailable"]
            if value == 0 or _percent(value) == 0 or value == "0":
                yield Hit(doc, "spec.maxUnavailable", "maxUnavailable 0 allows no eviction")
            continue
        value = spec.get("minAvailable")
        if value is None:
            continue
        if _percent(value) == 100:
            yield Hit(doc, "spec.minAvailable", "minAvailable 100% allows no eviction")
            continue
        if not isinstance(value, int):
            continue
        for pod in ctx.pods_for_pdb(doc):
            replicas = ctx.min_replicas(pod)
            if value >= replicas:
                yield Hit(
                    doc,
                    "spec.minAvailable",
                    f"minAvailable {value} ≥ {replicas} replica(s) of "
                    f"{pod.kind}/{pod.name}: no pod can ever be evicted",
                )


PDB_BLOCKS_EVICTION = Rule(
    id="pdb-blocks-eviction",
    severity=Severity.ERROR,
    title="PodDisruptionBudget that blocks every eviction",
    why="With minAvailable ≥ replicas (or maxUnavailable 0) disruptionsAllowed is 0: node "
    "drains hang until an operator deletes pods by hand, cluster upgrades stall, and the "
    "autoscaler cannot remove the node.",
    fix="Keep minAvailable below the replica floor (replicas - 1) or use maxUnavailable: 1.",
    check=_blocks,
)


def _weak(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("PodDisruptionBudget"):
        value = (doc.manifest.get("spec") or {}).get("minAvailable")
        if not isinstance(value, int):
            continue
        for pod in ctx.pods_for_pdb(doc):
            top = ctx.max_replicas(pod)
            allowed = top - value
            # An absolute floor fixed for the smallest size lets a drain take everything
            # above it at once; a quarter of the pods (at least one) is a sane ceiling.
            if allowed > max(1, -(-top // 4)):
                yield Hit(
                    doc,
                    "spec.minAvailable",
                    f"at {top} replicas of {pod.kind}/{pod.name}, minAvailable {value} lets "
                    f"one drain evict {allowed} pods at once",
                )


PDB_WEAK_AT_SCALE = Rule(
    id="pdb-weak-at-scale",
    severity=Severity.WARNING,
    title="PodDisruptionBudget that protects nothing once the service scales out",
    why="An absolute minAvailable is sized for the replica floor: `minAvailable: 1` on a "
    "service autoscaled to 8 lets a node drain or consolidation evict 7 replicas at once, "
    "and each needs minutes to load elsewhere while the survivor takes all the traffic. "
    "maxUnavailable (or a percentage) keeps the budget proportional to the current size. "
    "Flags an integer minAvailable that, at the workload's most replicas (the autoscaler's "
    "maximum), lets more than a quarter of them (at least 1) go at once.",
    fix="Use maxUnavailable: 1 (or a small percentage) for autoscaled services, or a "
    "minAvailable percentage such as 75%.",
    check=_weak,
)
