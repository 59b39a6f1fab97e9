"""Across objects: a Service whose named targetPort no selected pod template declares. The
API server accepts it; the EndpointSlice controller then resolves the port per pod with
`FindPort` (pkg/api/v1/pod/util.go in kubernetes/kubernetes: same name *and* protocol, in
the containers or restartable init containers), gets `no suitable port for manifest`, and
leaves every such pod out of the Service: it has no endpoints on that port."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from podserve.kube.apiserver.apps import selector_matches
from podserve.kube.apiserver.errors import (
    K8S,
    ErrorType,
    FieldError,
    Path,
    items,
    mapping,
    object_label,
)
from podserve.kube.types import Manifest, Severity

FIND_PORT = K8S + "pkg/api/v1/pod/util.go"
_TEMPLATE_KINDS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}


def _template(manifest: Manifest) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(labels, pod spec) of a workload's pod template, or of a Pod."""
    kind = str(manifest.get("kind"))
    if kind == "Pod":
        meta = mapping(manifest.get("metadata"))
        return mapping(meta.get("labels")), mapping(manifest.get("spec"))
    if kind in _TEMPLATE_KINDS:
        template = mapping(mapping(manifest.get("spec")).get("template"))
        return mapping(mapping(template.get("metadata")).get("labels")), mapping(
            template.get("spec")
        )
    return None


def _declared(pod: dict[str, Any]) -> set[tuple[str, str]]:
    containers = list(items(pod.get("containers")))
    containers += [
        c for c in items(pod.get("initContainers")) if mapping(c).get("restartPolicy") == "Always"
    ]
    return {
        (str(mapping(p).get("name")), str(mapping(p).get("protocol", "TCP")))
        for c in containers
        for p in items(mapping(c).get("ports"))
        if mapping(p).get("name")
    }


def check_service_ports(manifests: Iterable[Manifest]) -> Iterator[tuple[Manifest, FieldError]]:
    listed = list(manifests)
    pods = [
        (str(mapping(m.get("metadata")).get("namespace", "")), found)
        for m in listed
        if (found := _template(m)) is not None
    ]
    for service in listed:
        if service.get("kind") != "Service" or service.get("apiVersion") != "v1":
            continue
        spec = mapping(service.get("spec"))
        selector = mapping(spec.get("selector"))
        namespace = str(mapping(service.get("metadata")).get("namespace", ""))
        selected = [
            pod
            for ns, (labels, pod) in pods
            if selector and ns == namespace and selector_matches({"matchLabels": selector}, labels)
        ]
        if not selected:
            continue  # the pods are not among these manifests: nothing to compare
        for i, port in enumerate(items(spec.get("ports"))):
            target = mapping(port).get("targetPort")
            if not isinstance(target, str) or target.isdigit():
                continue
            protocol = str(mapping(port).get("protocol", "TCP"))
            if any((target, protocol) in _declared(pod) for pod in selected):
                continue
            yield (
                service,
                FieldError(
                    object_label(service),
                    str(Path("spec.ports").index(i).child("targetPort")),
                    ErrorType.NOT_FOUND,
                    target,
                    f"accepted by the API server, but no selected pod declares a {protocol} port "
                    f"named {target}: the EndpointSlice controller gets `no suitable port for "
                    "manifest` and the Service has no endpoints on this port",
                    FIND_PORT,
                    Severity.WARNING,
                ),
            )
