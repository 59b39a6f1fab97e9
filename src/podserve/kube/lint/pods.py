"""Finds the pod inside any workload object (Deployment, StatefulSet, DaemonSet, ReplicaSet,
Job, CronJob, Pod, KServe InferenceService) and reads what the rules ask of it."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from podserve.config.model_service import quantity_value
from podserve.kube import conventions as c
from podserve.kube.types import Document, Manifest

_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
SERVED_KINDS = {"Deployment", "StatefulSet", "ReplicaSet", "Pod", "InferenceService"}


def is_gpu_resource(name: str) -> bool:
    return "gpu" in name or "/mig-" in name


def quantity(value: Any) -> Decimal | None:
    try:
        return quantity_value(str(value))
    except ValueError:
        return None


def annotations_of(manifest: Mapping[str, Any]) -> dict[str, str]:
    meta = manifest.get("metadata") or {}
    raw = meta.get("annotations") or {}
    return {str(k): str(v) for k, v in raw.items()}


def object_label(manifest: Mapping[str, Any]) -> str:
    meta = manifest.get("metadata")
    meta = meta if isinstance(meta, Mapping) else {}
    namespace = meta.get("namespace")
    name = meta.get("name", "?")
    prefix = f"{manifest.get('kind', '?')}/"
    return prefix + (f"{namespace}/{name}" if namespace else str(name))


@dataclass(frozen=True, slots=True)
class Container:
    spec: Mapping[str, Any]
    path: str  # e.g. spec.template.spec.containers[server]
    init: bool

    @property
    def name(self) -> str:
        return str(self.spec.get("name", "?"))

    def resource(self, section: str, name: str) -> Any:
        return ((self.spec.get("resources") or {}).get(section) or {}).get(name)

    def resource_names(self) -> set[str]:
        res = self.spec.get("resources") or {}
        return set((res.get("requests") or {}) | (res.get("limits") or {}))

    def probe(self, kind: str) -> Mapping[str, Any] | None:
        probe = self.spec.get(kind)
        return probe if isinstance(probe, Mapping) else None


@dataclass(frozen=True, slots=True)
class PodView:
    document: Document
    kind: str
    pod_path: str
    pod: Mapping[str, Any]
    annotations: Mapping[str, str]
    labels: Mapping[str, str]
    namespace: str
    name: str
    # KServe fills in probes, lifecycle and strategy from its ServingRuntime.
    runtime_managed: bool = False
    extra_models: tuple[str, ...] = field(default=())

    @property
    def manifest(self) -> Manifest:
        return self.document.manifest

    @property
    def served(self) -> bool:
        return self.kind in SERVED_KINDS

    def containers(self, *, init: bool = False) -> list[Container]:
        result = []
        sections = ["initContainers", "containers"] if init else ["containers"]
        for section in sections:
            for item in self.pod.get(section) or []:
                if isinstance(item, Mapping):
                    result.append(
                        Container(
                            item,
                            f"{self.pod_path}.{section}[{item.get('name')}]",
                            section == "initContainers",
                        )
                    )
        return result

    @property
    def gpu(self) -> bool:
        return any(
            is_gpu_resource(r) for ctr in self.containers(init=True) for r in ctr.resource_names()
        )

    @property
    def model_pod(self) -> bool:
        """Loads a model: GPU pods, pods podserve rendered, KServe predictors."""
        return (
            self.gpu
            or c.LOAD_SECONDS in self.annotations
            or c.MODEL_URI in self.annotations
            or self.kind == "InferenceService"
        )

    def annotation_number(self, key: str) -> float | None:
        try:
            return float(self.annotations[key])
        except (KeyError, ValueError):
            return None

    @property
    def grace_period_s(self) -> int:
        value = self.pod.get("terminationGracePeriodSeconds")
        return int(value) if isinstance(value, int) else 30  # API default

    def volumes(self) -> list[Mapping[str, Any]]:
        return [v for v in self.pod.get("volumes") or [] if isinstance(v, Mapping)]

    def tolerations(self) -> list[Mapping[str, Any]]:
        return [t for t in self.pod.get("tolerations") or [] if isinstance(t, Mapping)]

    def node_terms(self) -> list[tuple[str, str, list[str], bool]]:
        """(key, operator, values, required) for each node selector and affinity term."""
        terms = [
            (str(k), "In", [str(v)], True) for k, v in (self.pod.get("nodeSelector") or {}).items()
        ]
        affinity = (self.pod.get("affinity") or {}).get("nodeAffinity") or {}
        required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
        for term in required.get("nodeSelectorTerms") or []:
            for expr in term.get("matchExpressions") or []:
                terms.append(
                    (
                        str(expr.get("key")),
                        str(expr.get("operator")),
                        [str(v) for v in expr.get("values") or []],
                        True,
                    )
                )
        for pref in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
            for expr in (pref.get("preference") or {}).get("matchExpressions") or []:
                terms.append(
                    (
                        str(expr.get("key")),
                        str(expr.get("operator")),
                        [str(v) for v in expr.get("values") or []],
                        False,
                    )
                )
        return terms


def _merge_annotations(manifest: Manifest, template: Mapping[str, Any]) -> dict[str, str]:
    merged = annotations_of(template)
    merged.update(annotations_of(manifest))
    return merged


def _view(doc: Document, kind: str, path: str, template: Mapping[str, Any]) -> PodView | None:
    pod = template.get("spec")
    if not isinstance(pod, Mapping):
        return None
    meta = doc.manifest.get("metadata") or {}
    return PodView(
        document=doc,
        kind=kind,
        pod_path=path,
        pod=pod,
        annotations=_merge_annotations(doc.manifest, template),
        labels={
            str(k): str(v)
            for k, v in ((template.get("metadata") or {}).get("labels") or {}).items()
        },
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
    )


def _kserve_view(doc: Document) -> PodView | None:
    predictor = (doc.manifest.get("spec") or {}).get("predictor")
    if not isinstance(predictor, Mapping):
        return None
    pod: dict[str, Any] = {k: v for k, v in predictor.items() if k not in {"model"}}
    containers = list(predictor.get("containers") or [])
    model = predictor.get("model")
    managed = False
    uris: list[str] = []
    if isinstance(model, Mapping):
        container = {
            k: v
            for k, v in model.items()
            if k not in {"modelFormat", "runtime", "storageUri", "protocolVersion"}
        }
        container.setdefault("name", "kserve-container")
        containers.insert(0, container)
        managed = True
        if model.get("storageUri"):
            uris.append(str(model["storageUri"]))
    pod["containers"] = containers
    meta = doc.manifest.get("metadata") or {}
    return PodView(
        document=doc,
        kind="InferenceService",
        pod_path="spec.predictor",
        pod=pod,
        annotations=annotations_of(doc.manifest),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        runtime_managed=managed,
        extra_models=tuple(uris),
    )


def pod_view(doc: Document) -> PodView | None:
    manifest = doc.manifest
    kind = str(manifest.get("kind", ""))
    spec = manifest.get("spec") or {}
    if kind in _TEMPLATE_KINDS:
        return _view(doc, kind, "spec.template.spec", spec.get("template") or {})
    if kind == "CronJob":
        template = ((spec.get("jobTemplate") or {}).get("spec") or {}).get("template") or {}
        return _view(doc, kind, "spec.jobTemplate.spec.template.spec", template)
    if kind == "Pod":
        return _view(doc, kind, "spec", manifest)
    if kind == "InferenceService":
        return _kserve_view(doc)
    return None


def pod_views(documents: list[Document]) -> Iterator[PodView]:
    for doc in documents:
        view = pod_view(doc)
        if view is not None:
            yield view


def int_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    """Resolve an IntOrString the way the deployment controller does (§2 fenceposts)."""
    if isinstance(value, int):
        return value
    text = str(value)
    match = re.fullmatch(r"(\d+)%", text)
    if match is None:
        return int(text) if text.isdigit() else 0
    exact = int(match[1]) * total / 100
    return math.ceil(exact) if round_up else math.floor(exact)
