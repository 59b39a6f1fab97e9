"""Writing rendered objects: one stream, one file per object, or a kustomize base."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import yaml

from podserve.kube.types import Manifest
from podserve.kube.yamlio import dump


def file_name(index: int, manifest: Manifest) -> str:
    kind = str(manifest.get("kind", "object")).lower()
    name = str((manifest.get("metadata") or {}).get("name", "unnamed"))
    safe = re.sub(r"[^a-z0-9.-]", "-", name.lower())
    return f"{index:02d}-{kind}-{safe}.yaml"


def write_files(manifests: Sequence[Manifest], directory: Path) -> list[Path]:
    """One file per object, numbered in apply order (`kubectl apply -f DIR` reads them in
    name order)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for index, manifest in enumerate(manifests, start=1):
        path = directory / file_name(index, manifest)
        path.write_text(dump(manifest))
        written.append(path)
    return written


def write_kustomize(manifests: Sequence[Manifest], directory: Path, namespace: str) -> list[Path]:
    """A kustomize base: the object files plus a kustomization.yaml listing them in apply
    order (overlays patch images, replicas or canary weights on top)."""
    written = write_files(manifests, directory)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "namespace": namespace,
        "resources": [p.name for p in written],
    }
    path = directory / "kustomization.yaml"
    path.write_text(yaml.safe_dump(kustomization, sort_keys=False))
    return [*written, path]
