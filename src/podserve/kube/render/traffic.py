"""Gateway API HTTPRoute (weighted backendRefs carry the canary split; weights are shares
of their sum, kubernetes-semantics.md §8) and the Inference Extension InferencePool."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import GatewayRef, ModelService
from podserve.kube import conventions as c
from podserve.kube.render.variant import Variant, metadata
from podserve.kube.types import Manifest

POOL_GROUP = "inference.networking.k8s.io"


def endpoint_picker(service: ModelService, variant: Variant) -> str:
    """One endpoint picker per pool: an EPP runs with `--pool-name` naming one
    InferencePool (gateway-api-inference-extension pkg/epp/server/options.go), so the
    canary's pool needs its own, or its share is picked from the stable pods. The default
    name is the chart's `<release>-epp` for a release named after the pool
    (config/charts/epplib/templates/_helpers.tpl)."""
    pool = service.spec.inference_pool
    assert pool is not None
    given = pool.canary_endpoint_picker if variant.track == "canary" else pool.endpoint_picker
    return given or f"{variant.name}-epp"


def inference_pool(service: ModelService, variant: Variant) -> Manifest:
    pool = service.spec.inference_pool
    assert pool is not None
    return {
        "apiVersion": f"{POOL_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": metadata(service, variant.name, "routing", variant.track),
        "spec": {
            "selector": {"matchLabels": variant.selector(service)},
            "targetPorts": [{"number": c.HTTP_PORT}],
            "endpointPickerRef": {
                "name": endpoint_picker(service, variant),
                "port": {"number": pool.endpoint_picker_port},
                "failureMode": "FailOpen" if pool.fail_open else "FailClose",
            },
        },
    }


def _backend(service: ModelService, variant: Variant, weight: int) -> dict[str, Any]:
    if service.spec.inference_pool is not None:
        return {
            "group": POOL_GROUP,
            "kind": "InferencePool",
            "name": variant.name,
            "weight": weight,
        }
    return {"name": variant.name, "port": c.HTTP_PORT, "weight": weight}


def _parent(service: ModelService, gateway: GatewayRef) -> dict[str, Any]:
    parent: dict[str, Any] = {"name": gateway.name}
    if gateway.namespace and gateway.namespace != service.metadata.namespace:
        parent["namespace"] = gateway.namespace
    if gateway.section_name:
        parent["sectionName"] = gateway.section_name
    return parent


def http_route(service: ModelService, variants: list[Variant]) -> Manifest:
    gateway = service.spec.gateway
    assert gateway is not None
    canary = service.spec.canary
    percent = canary.percent if canary is not None else 0
    weights = {"stable": 100 - percent, "canary": percent}
    annotations = {c.STABLE_BACKEND: variants[0].name}
    if len(variants) > 1:
        annotations[c.CANARY_BACKEND] = variants[1].name
    spec: dict[str, Any] = {"parentRefs": [_parent(service, gateway)]}
    if gateway.hostnames:
        spec["hostnames"] = list(gateway.hostnames)
    spec["rules"] = [
        {
            "matches": [{"path": {"type": "PathPrefix", "value": gateway.path}}],
            "backendRefs": [_backend(service, v, weights[v.track]) for v in variants],
        }
    ]
    return {
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": metadata(service, service.metadata.name, "routing", None, annotations),
        "spec": spec,
    }
