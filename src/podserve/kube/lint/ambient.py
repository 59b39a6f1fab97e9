"""Istio ambient mode: which pods are in the ambient mesh, and which Services' traffic an
L7 waypoint proxy handles (and so retries), as Istio itself decides.

- A pod is in the ambient mesh when the pod or its Namespace has
  `istio.io/dataplane-mode: ambient`; the pod label `istio.io/dataplane-mode: none`
  (or the older pod annotation `ambient.istio.io/redirection: disabled`) opts it out, and
  a pod with a sidecar is never captured: "Ztunnel and sidecar for a single pod is
  currently not supported; opt out" (istio/istio, cni `PodRedirectionEnabled`;
  istio.io docs, "Resource Labels" → `istio.io/dataplane-mode`, values `ambient`, `none`).
- ztunnel, the node proxy of an ambient pod, works at L4 only and never retries; L7
  policy (routes, retries, timeouts) is applied by the *destination's* waypoint, and only
  for a Service enrolled in one (istio.io docs, "Configure waypoint proxies"): the label
  `istio.io/use-waypoint: <waypoint>` on the Service, else on its Namespace, with
  `istio.io/use-waypoint-namespace` naming the waypoint's namespace when it is another;
  `istio.io/use-waypoint: none` on the Service opts it out of its Namespace's waypoint
  (istio/istio, pilot/.../ambient/waypoints.go `fetchWaypointForTarget`, `getUseWaypoint`:
  "Istio reserves the word none"). A waypoint whose Gateway is labelled
  `istio.io/waypoint-for: workload` or `none` takes no Service traffic, and ztunnel then
  sends it straight to the pods ("Waypoint traffic types"; "Require traffic to traverse
  the waypoint"). A waypoint's own Service (`gateway.istio.io/managed:
  istio.io/mesh-controller`) has none.
- Only an ambient caller's ztunnel sends to the waypoint: "a workload outside of the mesh
  doesn't know anything about waypoint proxies therefore it sends requests directly to the
  destination", and so do sidecars (istio.io docs, "Ambient data plane" → "Inbound";
  istio/istio, ambient/sidecar_interop.go: the waypoint endpoints are computed "only ...
  for ingress/east west gateway -> waypoint usage. If we extend this to sidecars, etc we
  can drop this").
- An ingress gateway programmed by istiod (and kgateway) calls the waypoint only when the
  Service, or else its Namespace, has `istio.io/ingress-use-waypoint: "true"` (a Go
  `strconv.ParseBool` true; the Service's label wins over the Namespace's), Namespace
  label from Istio 1.25 ("Configure waypoint proxies" → "Ingress gateways and waypoints";
  istio/istio `ingressUseWaypointFromLabels`; istiod's `ENABLE_INGRESS_WAYPOINT_ROUTING`,
  true by default in pilot/pkg/features although that page says false). The label says
  nothing about an ordinary pod outside the mesh, such as a podserve gateway without
  sidecar or ambient: its traffic reaches the pods directly, waypoint or not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.mesh import ISTIO_REV, istio_sidecar, namespace_meta, strings
from podserve.kube.lint.pods import PodView

DATAPLANE_MODE = "istio.io/dataplane-mode"
AMBIENT_REDIRECTION = "ambient.istio.io/redirection"
USE_WAYPOINT = "istio.io/use-waypoint"
USE_WAYPOINT_NAMESPACE = "istio.io/use-waypoint-namespace"
INGRESS_USE_WAYPOINT = "istio.io/ingress-use-waypoint"
WAYPOINT_FOR = "istio.io/waypoint-for"
GATEWAY_MANAGED = "gateway.istio.io/managed"
_GO_TRUE = {"1", "t", "T", "TRUE", "true", "True"}  # strconv.ParseBool

ServiceKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class Waypoint:
    namespace: str
    name: str
    revision: str | None  # the istiod revision that programs it (its mesh config)

    def named_from(self, namespace: str) -> str:
        return self.name if self.namespace == namespace else f"{self.namespace}/{self.name}"


def ambient_pod(ctx: LintContext, pod: PodView) -> bool:
    """Whether ztunnel captures this pod's traffic (the policy above)."""
    if istio_sidecar(ctx, pod):
        return False
    if pod.annotations.get(AMBIENT_REDIRECTION) == "disabled":
        return False
    own = pod.labels.get(DATAPLANE_MODE)
    if own is not None:
        return own == "ambient"
    ns_labels = strings((namespace_meta(ctx, pod.namespace) or {}).get("labels"))
    return ns_labels.get(DATAPLANE_MODE) == "ambient"


def _service_labels(ctx: LintContext, key: ServiceKey) -> dict[str, str] | None:
    for doc in ctx.of_kind("Service"):
        meta = doc.manifest.get("metadata") or {}
        if (str(meta.get("namespace", "")), str(meta.get("name", ""))) == key:
            return strings(meta.get("labels"))
    return None


def _use_waypoint(labels: Mapping[str, str], namespace: str) -> tuple[str, str] | bool | None:
    """(namespace, name) of the waypoint these labels enrol in, False for `none`, None
    when they name none."""
    value = labels.get(USE_WAYPOINT)
    if value is None:
        return None
    if value == "none":
        return False
    return labels.get(USE_WAYPOINT_NAMESPACE, namespace), value


def _gateway(ctx: LintContext, namespace: str, name: str) -> Mapping[str, Any] | None:
    for doc in ctx.of_kind("Gateway"):
        if not str(doc.manifest.get("apiVersion", "")).startswith("gateway.networking.k8s.io/"):
            continue  # Istio's own networking.istio.io Gateway is no waypoint
        meta = doc.manifest.get("metadata") or {}
        if (str(meta.get("namespace", "")), str(meta.get("name", ""))) == (namespace, name):
            return doc.manifest
    return None


def service_waypoint(ctx: LintContext, key: ServiceKey) -> Waypoint | None:
    """The waypoint that handles traffic addressed to the Service, if any."""
    labels = _service_labels(ctx, key) or {}
    if labels.get(GATEWAY_MANAGED) == "istio.io/mesh-controller":
        return None  # a waypoint's own Service
    target = _use_waypoint(labels, key[0])
    if target is None:
        ns_labels = strings((namespace_meta(ctx, key[0]) or {}).get("labels"))
        target = _use_waypoint(ns_labels, key[0])
    if not isinstance(target, tuple):
        return None
    gateway = _gateway(ctx, *target)
    gw_labels = strings((gateway or {}).get("metadata", {}).get("labels"))
    if gw_labels.get(WAYPOINT_FOR, "service") not in {"service", "all"}:
        return None
    revision = gw_labels.get(ISTIO_REV) or strings(
        (namespace_meta(ctx, target[0]) or {}).get("labels")
    ).get(ISTIO_REV)
    return Waypoint(target[0], target[1], revision)


def ingress_uses_waypoint(ctx: LintContext, key: ServiceKey) -> bool:
    """Whether an ingress gateway sends the Service's traffic through its waypoint."""
    value = (_service_labels(ctx, key) or {}).get(INGRESS_USE_WAYPOINT)
    if value is None:
        ns_labels = strings((namespace_meta(ctx, key[0]) or {}).get("labels"))
        value = ns_labels.get(INGRESS_USE_WAYPOINT)
    return value in _GO_TRUE
