"""Objects the rules cannot read: a field of the wrong type (a string where the API has a
list, a number where it has a map). The API server rejects such an object outright; the
linter reports it once, here, instead of failing on it (engine.py also routes any rule
that trips over a document here and keeps checking the rest)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Document, Severity

_MAPS = ("metadata", "spec")
_META_MAPS = ("labels", "annotations")
_POD_LISTS = ("containers", "initContainers", "volumes", "tolerations",
              "topologySpreadConstraints")  # fmt: skip
_POD_MAPS = ("nodeSelector", "affinity", "securityContext")
_CONTAINER_LISTS = ("command", "args", "env", "envFrom", "ports", "volumeMounts")
_CONTAINER_MAPS = ("resources", "securityContext", "lifecycle")
_TEMPLATE_PATHS = {
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


def _wrong(value: Any, kind: type) -> bool:
    return value is not None and not isinstance(value, kind)


def _pod(pod: Any, path: str) -> Iterator[tuple[str, str]]:
    if _wrong(pod, Mapping):
        yield path, "is not a map"
        return
    pod = pod or {}
    for key in _POD_LISTS:
        if _wrong(pod.get(key), list):
            yield f"{path}.{key}", "is not a list"
    for key in _POD_MAPS:
        if _wrong(pod.get(key), Mapping):
            yield f"{path}.{key}", "is not a map"
    for section in ("containers", "initContainers"):
        items = pod.get(section)
        for i, ctr in enumerate(items if isinstance(items, list) else []):
            at = f"{path}.{section}[{i}]"
            if not isinstance(ctr, Mapping):
                yield at, "is not a map"
                continue
            for key in _CONTAINER_LISTS:
                if _wrong(ctr.get(key), list):
                    yield f"{at}.{key}", "is not a list"
            for key in _CONTAINER_MAPS:
                if _wrong(ctr.get(key), Mapping):
                    yield f"{at}.{key}", "is not a map"
            resources = ctr.get("resources") or {}
            for key in ("requests", "limits"):
                if isinstance(resources, Mapping) and _wrong(resources.get(key), Mapping):
                    yield f"{at}.resources.{key}", "is not a map"


def problems(doc: Document) -> list[tuple[str, str]]:
    """(field, what is wrong) for the shapes the rules rely on."""
    manifest = doc.manifest
    found: list[tuple[str, str]] = []
    if not isinstance(manifest.get("kind", ""), str):
        found.append(("kind", "is not a string"))
        return found
    for key in _MAPS:
        if _wrong(manifest.get(key), Mapping):
            found.append((key, "is not a map"))
    meta = manifest.get("metadata")
    for key in _META_MAPS:
        if isinstance(meta, Mapping) and _wrong(meta.get(key), Mapping):
            found.append((f"metadata.{key}", "is not a map"))
    if found:
        return found
    path = _TEMPLATE_PATHS.get(str(manifest.get("kind")))
    node: Any = manifest
    walked: list[str] = []
    for key in path or ():
        node = node.get(key) if isinstance(node, Mapping) else None
        walked.append(key)
        if _wrong(node, Mapping):
            return [(".".join(walked), "is not a map")]
    if path is not None and isinstance(node, Mapping):
        found += _pod(node.get("spec"), ".".join([*walked, "spec"]))
    elif manifest.get("kind") == "Pod":
        found += _pod(manifest.get("spec"), "spec")
    return found


def _malformed(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.documents:
        for field, what in problems(doc):
            yield Hit(doc, field, f"{what}: the API server rejects this object")


MALFORMED_OBJECT = Rule(
    id="malformed-object",
    severity=Severity.ERROR,
    title="Object with a field of the wrong type",
    why="A field of the wrong type (a string where Kubernetes expects a list of containers, "
    "a number where it expects a map of labels) makes the API server reject the whole object "
    "at apply time, and leaves nothing the other rules can judge: they skip this object, "
    "and this rule says why.",
    fix="Give the field the type the Kubernetes API reference lists; `podserve lint --strict` "
    "adds the schema's exact complaint.",
    check=_malformed,
)
