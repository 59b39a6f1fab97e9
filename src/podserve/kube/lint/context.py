"""Everything a rule may look up across the linted documents: pods, autoscalers and PDBs
that point at them, and the replica count each workload effectively runs with."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podserve.kube.lint.pods import PodView, pod_views
from podserve.kube.types import Document


def _namespace(doc: Document) -> str:
    return str((doc.manifest.get("metadata") or {}).get("namespace", ""))


def _selects(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    match = selector.get("matchLabels") or {}
    if not match and not selector.get("matchExpressions"):
        return False
    if any(labels.get(str(k)) != str(v) for k, v in match.items()):
        return False
    for expr in selector.get("matchExpressions") or []:
        key, op = str(expr.get("key")), expr.get("operator")
        values = [str(v) for v in expr.get("values") or []]
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and labels.get(key) in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


@dataclass(frozen=True, slots=True)
class LintContext:
    documents: tuple[Document, ...]
    pods: tuple[PodView, ...]

    @classmethod
    def build(cls, documents: list[Document]) -> LintContext:
        return cls(tuple(documents), tuple(pod_views(documents)))

    def of_kind(self, *kinds: str) -> list[Document]:
        return [d for d in self.documents if d.manifest.get("kind") in kinds]

    def autoscalers_for(self, pod: PodView) -> list[Document]:
        """HPAs and ScaledObjects whose scaleTargetRef names this workload."""
        found = []
        for doc in self.of_kind("HorizontalPodAutoscaler", "ScaledObject"):
            ref = (doc.manifest.get("spec") or {}).get("scaleTargetRef") or {}
            kind = ref.get("kind", "Deployment")
            if (
                ref.get("name") == pod.name
                and kind == pod.kind
                and _namespace(doc) == pod.namespace
            ):
                found.append(doc)
        return found

    def target_of(self, autoscaler: Document) -> PodView | None:
        ref = (autoscaler.manifest.get("spec") or {}).get("scaleTargetRef") or {}
        for pod in self.pods:
            if (
                pod.name == ref.get("name")
                and pod.kind == ref.get("kind", "Deployment")
                and pod.namespace == _namespace(autoscaler)
            ):
                return pod
        return None

    def pdbs_for(self, pod: PodView) -> list[Document]:
        return [
            doc
            for doc in self.of_kind("PodDisruptionBudget")
            if _namespace(doc) == pod.namespace
            and _selects((doc.manifest.get("spec") or {}).get("selector") or {}, pod.labels)
        ]

    def pods_for_pdb(self, pdb: Document) -> list[PodView]:
        selector = (pdb.manifest.get("spec") or {}).get("selector") or {}
        return [
            p
            for p in self.pods
            if p.namespace == _namespace(pdb) and p.served and _selects(selector, p.labels)
        ]

    def min_replicas(self, pod: PodView) -> int:
        """The fewest replicas this workload runs: an autoscaler's floor, else spec.replicas."""
        floors = []
        for doc in self.autoscalers_for(pod):
            spec = doc.manifest.get("spec") or {}
            value = spec.get("minReplicas", spec.get("minReplicaCount"))
            floors.append(int(value) if isinstance(value, int) else 1)
        if floors:
            return min(floors)
        spec = pod.manifest.get("spec") or {}
        if pod.kind == "InferenceService":
            value = (spec.get("predictor") or {}).get("minReplicas", 1)
        elif pod.kind == "Pod":
            value = 1
        else:
            value = spec.get("replicas", 1)
        return int(value) if isinstance(value, int) else 1

    def max_replicas(self, pod: PodView) -> int:
        """The most replicas this workload runs: an autoscaler's ceiling (KEDA's default
        maxReplicaCount is 100), else the floor."""
        ceilings = []
        for doc in self.autoscalers_for(pod):
            spec = doc.manifest.get("spec") or {}
            value = spec.get("maxReplicas", spec.get("maxReplicaCount", 100))
            ceilings.append(int(value) if isinstance(value, int) else 100)
        return max(ceilings) if ceilings else self.min_replicas(pod)
