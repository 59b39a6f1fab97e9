"""INPUT → Scenario: a ModelService spec is rendered with `podserve.kube.render`; rendered
manifests (multi-document YAML) are read as they are."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import yaml

from podserve.config.model_service import load_model_service
from podserve.core.errors import InvalidInput
from podserve.kube.render import render
from podserve.kube.simulate.capacity import BenchCapacity, model_sizes, serving_resolver
from podserve.kube.simulate.manifests import scenario
from podserve.kube.simulate.objects import Scenario
from podserve.kube.types import Manifest
from podserve.kube.yamlio import parse_documents


def manifests_from_text(text: str, source: str = "<input>") -> list[Manifest]:
    docs = [d.manifest for d in parse_documents(text, source)]
    if not docs:
        raise InvalidInput(f"{source}: no documents (expected a ModelService or manifests)")
    if len(docs) == 1 and docs[0].get("kind") == "ModelService":
        service = load_model_service(yaml.safe_dump(docs[0]), source)
        return list(render(service).manifests)
    if any(d.get("kind") == "ModelService" for d in docs):
        raise InvalidInput(f"{source}: a ModelService must be the only document")
    if not any(d.get("kind") in {"Deployment", "StatefulSet"} for d in docs):
        raise InvalidInput(f"{source}: no Deployment or StatefulSet to simulate")
    return docs


def scenario_from_manifests(docs: Sequence[Manifest], bench: BenchCapacity | None) -> Scenario:
    try:
        found = scenario(docs, serving_resolver(docs, bench))
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        # A field of the wrong shape (replicas: "three", a bad quantity): name it, do not crash.
        raise InvalidInput(f"cannot read the manifests: {exc}") from exc
    sizes = model_sizes(docs)
    workloads = tuple(
        dataclasses.replace(
            w, template=dataclasses.replace(w.template, model_size_gb=sizes[w.name])
        )
        if w.name in sizes and not w.template.model_size_gb
        else w
        for w in found.workloads
    )
    return dataclasses.replace(found, workloads=workloads)
