"""A serving variant: the stable service, or the canary beside it. Each gets its own
workload, Service and PDB; both share the spec's resources, placement and timing."""

from __future__ import annotations

from dataclasses import dataclass

from podserve.config.model_service import Image, ModelService, ModelSource
from podserve.kube import conventions as c


@dataclass(frozen=True, slots=True)
class Variant:
    name: str
    track: str  # "stable" | "canary"
    model: ModelSource
    model_name: str  # what clients call: the canary answers to the stable name
    image: Image
    fixed_replicas: int | None  # None: an autoscaler owns the replica count

    def selector(self, service: ModelService) -> dict[str, str]:
        return {c.NAME_LABEL: service.metadata.name, c.TRACK_LABEL: self.track}


def variants(service: ModelService) -> list[Variant]:
    spec = service.spec
    name = service.metadata.name
    model_name = spec.model.name or name
    autoscaled = spec.autoscaling is not None
    stable = Variant(
        name=name,
        track="stable",
        model=spec.model,
        model_name=model_name,
        image=spec.image,
        fixed_replicas=None if autoscaled else spec.replicas.min,
    )
    if spec.canary is None:
        return [stable]
    canary = Variant(
        name=f"{name}-canary",
        track="canary",
        model=spec.canary.model,
        model_name=spec.canary.model.name or model_name,
        image=spec.canary.image or spec.image,
        fixed_replicas=spec.canary.replicas,
    )
    return [stable, canary]


def labels(service: ModelService, component: str, track: str | None = None) -> dict[str, str]:
    """Labels of every object: the user's, then ours (ours win: selectors depend on them)."""
    result = dict(sorted(service.metadata.labels.items()))
    result.update(
        {
            c.NAME_LABEL: service.metadata.name,
            c.COMPONENT_LABEL: component,
            c.MANAGED_BY_LABEL: "podserve",
        }
    )
    if track is not None:
        result[c.TRACK_LABEL] = track
    return result


def metadata(
    service: ModelService,
    name: str,
    component: str,
    track: str | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, object]:
    meta: dict[str, object] = {
        "name": name,
        "namespace": service.metadata.namespace,
        "labels": labels(service, component, track),
    }
    if annotations:
        meta["annotations"] = dict(sorted(annotations.items()))
    return meta
