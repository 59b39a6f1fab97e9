"""Who retries a request to a Service, for `retries-in-two-layers` (rules/routing.py).

A mesh retries in the *client's* proxy: Istio programs a VirtualService's `retries`, and
its default policy where none is set (2 retries on connect-failure, refused-stream,
unavailable, cancelled and 503), into the outbound routes of the calling pod's sidecar
(istio.io docs, "Traffic Management" → "Retries"; the VirtualService reference,
HTTPRetry); Linkerd's `retry.linkerd.io/*` annotations on a Service are applied by the
calling pod's proxy too (linkerd.io docs, "Retries"). The backend's own (inbound) proxy
never retries. So a retrying layer is multiplied by the mesh only when *its* outbound
traffic goes through a mesh proxy:

- the podserve gateway: its pods are among the linted objects, so whether they get a
  sidecar is read (mesh.py); its retries (`routing.retryBudgetRatio`, 0.2 by default)
  to a pool Service then multiply with that sidecar's retries: a VirtualService's, or
  Istio's default policy when no mesh VirtualService sets retries for the Service. A
  pool whose pods are injected, in front of a gateway that is not, is one layer.
- a Gateway API route (HTTPRoute/GRPCRoute retry, Envoy Gateway's BackendTrafficPolicy)
  or a VirtualService bound to an ingress gateway: the proxy's pods belong to the gateway
  implementation and are usually not linted. Only retries the mesh is *told* to make for
  the Service (a mesh VirtualService, Linkerd's annotations) count, since those apply to
  every meshed caller, and a meshed ingress proxy (as Linkerd's and Istio's third-party
  ingress guides set it up) adds them. Istio's default policy is not assumed from the
  backend's injection: the route's proxy is not the backend's sidecar.

Istio's ambient mode (ambient.py) moves L7 to the *destination*: an ambient caller's
ztunnel never retries, and a Service enrolled in a waypoint is retried by that waypoint,
with the Service's mesh routes (a mesh VirtualService, or a Gateway API route whose
parentRef is the Service, GAMMA) or else the mesh default policy (meshconfig.py). Before
Istio 1.30.3 a waypoint applied the default only where some route named the Service
(istio/istio#60682, fixed by #60683); the default is assumed either way. So:

- a podserve gateway in the ambient mesh (not a sidecar pod) whose pool Service uses a
  waypoint gets that waypoint's retries; out of the mesh it bypasses the waypoint;
- a Gateway API route (or gateway-bound VirtualService) to a Service with a waypoint and
  `istio.io/ingress-use-waypoint: "true"` is retried again by the waypoint, default
  policy included.

A Gateway API route whose parentRefs are all Services is a mesh route, not an ingress
layer: the sidecars, or the waypoint, apply its retries to every caller of the parent
Service, like a mesh VirtualService's (Istio converts it to one).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from podserve.kube.lint.ambient import (
    Waypoint,
    ambient_pod,
    ingress_uses_waypoint,
    service_waypoint,
)
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.gateway_pods import gateway_config_files, gateway_container
from podserve.kube.lint.mesh import istio_revision, istio_sidecar, linkerd_proxy
from podserve.kube.lint.meshconfig import default_retry
from podserve.kube.lint.pods import PodView
from podserve.kube.types import Document

ServiceKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class MeshRetry:
    where: str
    attempts: int


def _meta(doc: Document) -> Mapping[str, Any]:
    return doc.manifest.get("metadata") or {}


def _ns(doc: Document) -> str:
    return str(_meta(doc).get("namespace", ""))


def _attempts(retry: Any) -> int:
    if not isinstance(retry, Mapping):
        return 0
    value = retry.get("attempts", retry.get("numRetries", 0))
    return value if isinstance(value, int) else 0


def _service_of(host: str, namespace: str) -> ServiceKey:
    parts = host.split(".")
    return (parts[1] if len(parts) > 1 else namespace, parts[0])


def _vs_retries(vs: Document) -> Iterator[tuple[Document, ServiceKey, int]]:
    for http in (vs.manifest.get("spec") or {}).get("http") or []:
        attempts = _attempts(http.get("retries"))
        for route in http.get("route") or [] if attempts else []:
            host = str((route.get("destination") or {}).get("host", ""))
            yield vs, _service_of(host, _ns(vs)), attempts


def _mesh_bound(vs: Document) -> bool:
    gateways = (vs.manifest.get("spec") or {}).get("gateways") or []
    return not gateways or "mesh" in gateways


def _mesh_parents(route: Document) -> list[ServiceKey]:
    """The Services a GAMMA route is bound to, when all its parentRefs are Services."""
    refs = (route.manifest.get("spec") or {}).get("parentRefs") or []
    services = [
        (str(ref.get("namespace", _ns(route))), str(ref.get("name")))
        for ref in refs
        if ref.get("kind") == "Service" and ref.get("group", "") in {"", "core"}
    ]
    return services if refs and len(services) == len(refs) else []


def _gamma_retries(ctx: LintContext) -> Iterator[tuple[Document, ServiceKey, Any]]:
    """(route, parent Service, the rule's `retry` stanza) for each rule of a mesh route."""
    for route in ctx.of_kind("HTTPRoute", "GRPCRoute"):
        for parent in _mesh_parents(route):
            for rule in (route.manifest.get("spec") or {}).get("rules") or []:
                if "retry" in rule:
                    yield route, parent, rule.get("retry")


def route_retries(ctx: LintContext) -> Iterator[tuple[Document, ServiceKey, int]]:
    """Retries made by an ingress or Gateway API proxy, per backend Service."""
    policies: dict[ServiceKey, int] = {}
    for doc in ctx.of_kind("BackendTrafficPolicy"):  # Envoy Gateway
        attempts = _attempts((doc.manifest.get("spec") or {}).get("retry"))
        for ref in (doc.manifest.get("spec") or {}).get("targetRefs") or []:
            if ref.get("kind") in {"HTTPRoute", "GRPCRoute"} and attempts:
                policies[(_ns(doc), str(ref.get("name")))] = attempts
    for route in ctx.of_kind("HTTPRoute", "GRPCRoute"):
        if _mesh_parents(route):
            continue  # a mesh (GAMMA) route: MeshPolicies counts it
        policy = policies.get((_ns(route), str(_meta(route).get("name"))), 0)
        for rule in (route.manifest.get("spec") or {}).get("rules") or []:
            attempts = _attempts(rule.get("retry")) or policy
            for ref in rule.get("backendRefs") or [] if attempts else []:
                if ref.get("kind", "Service") == "Service":
                    key = (str(ref.get("namespace", _ns(route))), str(ref.get("name")))
                    yield route, key, attempts
    for vs in ctx.of_kind("VirtualService"):
        if not _mesh_bound(vs):
            yield from _vs_retries(vs)


@dataclass(frozen=True, slots=True)
class MeshPolicies:
    istio: dict[ServiceKey, MeshRetry]  # retries a mesh VirtualService or GAMMA route sets (> 0)
    istio_set: set[ServiceKey]  # Services whose mesh retries a route sets (0 too)
    linkerd: dict[ServiceKey, MeshRetry]
    ingress_waypoint: dict[ServiceKey, MeshRetry]  # waypoints ingress traffic goes through

    @classmethod
    def of(cls, ctx: LintContext) -> MeshPolicies:
        istio: dict[ServiceKey, MeshRetry] = {}
        istio_set: set[ServiceKey] = set()
        for vs in ctx.of_kind("VirtualService"):
            if not _mesh_bound(vs):
                continue
            for http in (vs.manifest.get("spec") or {}).get("http") or []:
                if "retries" not in http:
                    continue
                for route in http.get("route") or []:
                    host = str((route.get("destination") or {}).get("host", ""))
                    istio_set.add(_service_of(host, _ns(vs)))
            for _, key, attempts in _vs_retries(vs):
                istio[key] = MeshRetry(f"VirtualService {_meta(vs).get('name')}", attempts)
        for route, key, retry in _gamma_retries(ctx):
            istio_set.add(key)
            if _attempts(retry):
                where = f"{route.manifest.get('kind')} {_meta(route).get('name')}"
                istio[key] = MeshRetry(where, _attempts(retry))
        linkerd: dict[ServiceKey, MeshRetry] = {}
        for service in ctx.of_kind("Service"):
            annotations = _meta(service).get("annotations") or {}
            if "retry.linkerd.io/http" in annotations:
                limit = str(annotations.get("retry.linkerd.io/limit", "1"))
                key = (_ns(service), str(_meta(service).get("name")))
                linkerd[key] = MeshRetry("Linkerd", int(limit) if limit.isdigit() else 1)
        mesh = cls(istio, istio_set, linkerd, {})
        for _, key, _ in route_retries(ctx):
            waypoint = service_waypoint(ctx, key)
            if waypoint is not None and ingress_uses_waypoint(ctx, key):
                inner = mesh.at_waypoint(ctx, waypoint, key)
                if inner.attempts > 0:
                    mesh.ingress_waypoint[key] = inner
        return mesh

    def configured(self, key: ServiceKey) -> MeshRetry | None:
        """Retries the mesh is told to make for the Service, in any meshed caller, or
        that its waypoint makes on ingress traffic."""
        return self.ingress_waypoint.get(key) or self.istio.get(key) or self.linkerd.get(key)

    def _istio(self, key: ServiceKey, default: tuple[str, int]) -> MeshRetry | None:
        if key in self.istio:
            return self.istio[key]
        return None if key in self.istio_set else MeshRetry(*default)

    def at_waypoint(self, ctx: LintContext, waypoint: Waypoint, key: ServiceKey) -> MeshRetry:
        """Retries the Service's waypoint makes (0 when a route turns them off)."""
        inner = self._istio(key, default_retry(ctx, waypoint.revision))
        source, attempts = (inner.where, inner.attempts) if inner else ("retries: 0", 0)
        where = f"waypoint {waypoint.named_from(key[0])} of Service {key[0]}/{key[1]}"
        return MeshRetry(f"{where} ({source})", attempts)

    def in_caller(self, ctx: LintContext, pod: PodView, key: ServiceKey) -> MeshRetry | None:
        """Retries the pod's own outbound proxy, or the waypoint its ztunnel sends the
        Service's traffic to, makes to the Service."""
        if istio_sidecar(ctx, pod):
            inner = self._istio(key, default_retry(ctx, istio_revision(ctx, pod)))
            if inner is not None:
                return inner
        if ambient_pod(ctx, pod):
            waypoint = service_waypoint(ctx, key)
            return None if waypoint is None else self.at_waypoint(ctx, waypoint, key)
        if linkerd_proxy(ctx, pod):
            return self.linkerd.get(key)
        return None


def _endpoint_service(endpoint: str, namespace: str, known: set[ServiceKey]) -> ServiceKey | None:
    """The Service a pool endpoint names, when the sidecar can see it as HTTP: an
    `https://` endpoint is TLS the sidecar passes through unread, and an IP is a pod,
    not a Service route."""
    parts = urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    host = (parts.hostname or "").rstrip(".")
    if parts.scheme != "http" or not host:
        return None
    try:
        ipaddress.ip_address(host)
        return None
    except ValueError:
        pass
    labels = host.split(".")
    if len(labels) >= 3 and labels[2] == "svc":  # name.ns.svc[.cluster.local]
        return (labels[1], labels[0])
    key = (labels[1], labels[0]) if len(labels) == 2 else (namespace, labels[0])
    # `name` and `name.ns` resolve through the pod's DNS search path; other hosts (or a
    # two-label external name) are not cluster Services unless one of that name is linted
    return key if len(labels) <= 2 and key in known else None


def _ratio(body: Mapping[str, Any]) -> float:
    routing = body.get("routing")
    value = routing.get("retryBudgetRatio", 0.2) if isinstance(routing, Mapping) else 0.2
    return float(value) if isinstance(value, int | float) else 0.2


def gateway_layer_hits(
    ctx: LintContext, mesh: MeshPolicies
) -> Iterator[tuple[PodView, str, str, float, MeshRetry]]:
    """(gateway pod, pool, Service, retryBudgetRatio, the sidecar's retries) for each
    pool the podserve gateway retries through its mesh proxy or the pool's waypoint."""
    known = {(_ns(s), str(_meta(s).get("name"))) for s in ctx.of_kind("Service")}
    for pod in ctx.pods:
        gateway = gateway_container(pod)
        if gateway is None:
            continue
        for config in gateway_config_files(ctx, pod, gateway):
            ratio = _ratio(config.body)
            if ratio <= 0:
                continue  # the gateway does not retry
            seen: set[tuple[str, ServiceKey]] = set()
            for pool in config.body.get("pools") or []:
                if not isinstance(pool, Mapping):
                    continue
                for endpoint in pool.get("endpoints") or []:
                    key = _endpoint_service(str(endpoint), pod.namespace, known)
                    name = str(pool.get("name", "?"))
                    if key is None or (name, key) in seen:
                        continue
                    seen.add((name, key))
                    inner = mesh.in_caller(ctx, pod, key)
                    if inner is not None and inner.attempts > 0:
                        yield pod, name, f"{key[0]}/{key[1]}", ratio, inner
