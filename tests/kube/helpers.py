"""Small accessors for rendered manifests in tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from podserve.config.model_service import ModelService
from podserve.kube.types import Manifest


def find(manifests: Sequence[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [
        m
        for m in manifests
        if m["kind"] == kind and (name is None or m["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(manifests: Sequence[Manifest]) -> list[str]:
    return [m["kind"] for m in manifests]


def server(workload: Manifest) -> dict[str, Any]:
    containers: list[dict[str, Any]] = workload["spec"]["template"]["spec"]["containers"]
    return next(c for c in containers if c["name"] == "server")


def env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e["value"] for e in container.get("env", [])}


def with_spec(service: ModelService, **changes: Any) -> ModelService:
    """A copy of `service` with top-level spec fields replaced (validated again)."""
    document = service.to_document()
    document["spec"].update(changes)
    return ModelService.model_validate(document)
