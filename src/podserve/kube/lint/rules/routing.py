"""Traffic to model servers: one endpoint picker per InferencePool, an L7 hop for
long-lived gRPC connections, and retries in one layer only."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.retry_layers import MeshPolicies, gateway_layer_hits, route_retries
from podserve.kube.lint.signals import services_for
from podserve.kube.types import Document, Severity


def _meta(doc: Document) -> Mapping[str, Any]:
    return doc.manifest.get("metadata") or {}


def _ns(doc: Document) -> str:
    return str(_meta(doc).get("namespace", ""))


def _picker(doc: Document) -> tuple[str, str, str, str] | None:
    spec = doc.manifest.get("spec") or {}
    ref = spec.get("endpointPickerRef") or spec.get("extensionRef")  # v1 / v1alpha2
    if not isinstance(ref, Mapping) or not ref.get("name"):
        return None
    return (_ns(doc), str(ref.get("group", "")), str(ref.get("kind", "Service")), str(ref["name"]))


def _shared_picker(ctx: LintContext) -> Iterator[Hit]:
    owners: dict[tuple[str, str, str, str], str] = {}
    for doc in ctx.of_kind("InferencePool"):
        key = _picker(doc)
        if key is None:
            continue
        first = owners.setdefault(key, str(_meta(doc).get("name")))
        if first != _meta(doc).get("name"):
            yield Hit(
                doc,
                "spec.endpointPickerRef.name",
                f"endpoint picker {key[3]} already serves InferencePool {first}",
            )


INFERENCE_POOLS_SHARE_PICKER = Rule(
    id="inference-pools-share-picker",
    severity=Severity.ERROR,
    title="Two InferencePools point at one endpoint picker",
    why="An endpoint picker (EPP) is started for exactly one pool (`--pool-name`, "
    "gateway-api-inference-extension pkg/epp/server/options.go) and picks only among that "
    "pool's pods. A second pool that names the same picker gets endpoints from the first: "
    "a canary pool's share of traffic lands on the stable pods and the canary never sees "
    "a request.",
    fix="Deploy one endpoint picker per InferencePool (the chart's `<release>-epp` with "
    "`--pool-name <release>`) and point each pool's endpointPickerRef at its own.",
    check=_shared_picker,
)

_GRPC_PROTOCOLS = {"grpc", "kubernetes.io/h2c", "h2c", "http2", "kubernetes.io/h2"}
_MESH_MARKERS = (
    ("sidecar.istio.io/inject", "true"),
    ("linkerd.io/inject", "enabled"),
    ("istio.io/dataplane-mode", "ambient"),
)


def _grpc_ports(service: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(name, port number) of the ports that carry gRPC."""
    return [
        (str(port.get("name") or port.get("port")), port.get("port"))
        for port in (service.get("spec") or {}).get("ports") or []
        if str(port.get("appProtocol", "")).lower() in _GRPC_PROTOCOLS
        or str(port.get("name", "")).startswith("grpc")
    ]


def _routed_ports(ctx: LintContext) -> set[tuple[str, str, Any]]:
    """(namespace, Service, port) that a GRPCRoute or HTTPRoute sends traffic to."""
    routed = set()
    for route in ctx.of_kind("GRPCRoute", "HTTPRoute"):
        for rule in (route.manifest.get("spec") or {}).get("rules") or []:
            for ref in rule.get("backendRefs") or []:
                if ref.get("kind", "Service") == "Service" and ref.get("group", "") == "":
                    namespace = str(ref.get("namespace", _ns(route)))
                    routed.add((namespace, str(ref.get("name")), ref.get("port")))
    return routed


def _meshed(labels: Mapping[str, str], annotations: Mapping[str, str]) -> bool:
    return any(
        labels.get(key) == value or annotations.get(key) == value for key, value in _MESH_MARKERS
    )


def _grpc_l4(ctx: LintContext) -> Iterator[Hit]:
    routed = _routed_ports(ctx)
    for pod in ctx.pods:
        if not pod.served or ctx.max_replicas(pod) < 2 or _meshed(pod.labels, pod.annotations):
            continue
        for service in services_for(ctx, pod):
            spec = service.manifest.get("spec") or {}
            if spec.get("clusterIP") == "None":
                continue  # headless: clients balance per pod themselves
            key = (_ns(service), str(_meta(service).get("name")))
            ports = [
                name
                for name, number in _grpc_ports(service.manifest)
                if (*key, number) not in routed
            ]
            if not ports:
                continue
            yield Hit(
                service,
                "spec.ports",
                f"gRPC port {', '.join(ports)} reaches {ctx.max_replicas(pod)} replicas of "
                f"{pod.kind}/{pod.name} only through kube-proxy (L4): each HTTP/2 "
                "connection stays on one pod",
            )


GRPC_WITHOUT_L7_ROUTE = Rule(
    id="grpc-without-l7-route",
    severity=Severity.WARNING,
    title="gRPC to several replicas balanced only at L4",
    why="kube-proxy balances connections, not requests. gRPC multiplexes every call over "
    "one long-lived HTTP/2 connection, so each client pins all its traffic to the one pod "
    "its connection landed on: new replicas from a scale-up get nothing while the first "
    "ones queue, and a rollout moves whole clients at once (Kubernetes blog 'gRPC Load "
    "Balancing on Kubernetes without Tears').",
    fix="Route gRPC through an L7 proxy that balances per request (a GRPCRoute on the "
    "Gateway, or a service mesh), or give clients a headless Service with client-side "
    "round_robin balancing and a max connection age on the server.",
    check=_grpc_l4,
)


def _two_layers(ctx: LintContext) -> Iterator[Hit]:
    """Two retry layers on one hop (retry_layers.py says which proxy retries where)."""
    mesh = MeshPolicies.of(ctx)
    for doc, key, attempts in route_retries(ctx):
        inner = mesh.configured(key)
        if inner is not None:
            yield Hit(
                doc,
                "spec.rules",
                f"the gateway retries {key[1]} {attempts} times and {inner.where} retries it "
                f"{inner.attempts} times more: one request can reach the model "
                f"{(1 + attempts) * (1 + inner.attempts)} times",
            )
    for pod, pool, service, ratio, inner in gateway_layer_hits(ctx, mesh):
        yield Hit(
            pod.document,
            f"{pod.pod_path.removesuffix('spec')}metadata",
            f"the podserve gateway retries pool {pool} (retryBudgetRatio {ratio:g}) through "
            f"the mesh, where {inner.where} retries {service} {inner.attempts} "
            f"times more: a failing pool gets up to {(1 + ratio) * (1 + inner.attempts):g} "
            "times its requests in attempts",
        )


RETRIES_IN_TWO_LAYERS = Rule(
    id="retries-in-two-layers",
    severity=Severity.WARNING,
    title="Retries at the gateway and in the mesh",
    why="Retry layers multiply: 2 retries at the gateway and 2 in the sidecar send one "
    "failed request up to 9 times. On a model server a failure usually means overload "
    "(503 from a full queue, a timeout on a long generation), so the multiplied retries "
    "arrive exactly when the GPUs have no room, turning a brownout into an outage. A mesh "
    "retries in the caller's proxy (Istio's VirtualService retries and its default policy "
    "of 2 retries, Linkerd's retry annotations), never in the backend's: the podserve "
    "gateway's retries (`routing.retryBudgetRatio`, 0.2) are multiplied when its own pods "
    "get a sidecar (the Namespace's `istio-injection=enabled` or `istio.io/rev` label, the "
    "pod's `sidecar.istio.io/inject` label), and a Gateway API route's when the mesh is "
    "configured to retry the Service; pool pods with a sidecar behind a gateway without "
    "one are retried once. In Istio's ambient mode the mesh retries at the destination's "
    "waypoint: a podserve gateway in the ambient mesh (`istio.io/dataplane-mode: ambient`) "
    "whose pool Service uses a waypoint (`istio.io/use-waypoint` on the Service or its "
    "Namespace) gets its retries, as does an ingress route to a Service labelled "
    '`istio.io/ingress-use-waypoint: "true"`. `meshConfig.defaultHttpRetryPolicy` (the '
    "`istio` ConfigMap's `mesh` key) replaces the default of 2 when it is linted.",
    fix="Retry in one layer only (usually the gateway, with a budget): set the mesh's "
    "retries to 0 for the model service (a VirtualService with `retries: {attempts: 0}`, "
    "which also replaces Istio's default policy in the podserve gateway's sidecar or the "
    "Service's waypoint, or `defaultHttpRetryPolicy: {attempts: 0}` mesh-wide), and "
    "never retry non-idempotent long generations on timeout.",
    check=_two_layers,
)
