"""The gateway's PodMonitor and PrometheusRule: without them its Prometheus metrics
(docs/gateway.md "Cost visibility") are exported and never scraped on a cluster that runs
the Prometheus Operator.

The PodMonitor scrapes /metrics on the container's `http` port and copies the pod's
`app.kubernetes.io/name` into a `gateway` label. The operator adds `namespace` (the pod's)
as a target label (prometheus-operator pkg/prometheus/promcfg.go), and Prometheus renames
a scraped label that collides with a target label to `exported_<name>` (`honor_labels:
false`, the default: prometheus.io/docs/prometheus/latest/configuration/configuration/
#scrape_config). So on a cluster the gateway's own `namespace` label (the key's tenant
namespace, on requests, tokens and spend) is stored as `exported_namespace`, and
`namespace` is the gateway's Kubernetes namespace, which the alerts below select on.

The alerts:
- PodserveGatewayStoreUnavailable: requests refused because Redis or PostgreSQL is down
  (`podserve_gateway_rejections_total{reason="store"}`, gateway/errors.py StoreDown);
- PodserveGatewayErrorRatioHigh: the share of admitted requests answered 5xx (the
  upstreams failing, or no upstream left) over `monitoring.errorRatio`;
- PodserveGatewayOverloaded: requests refused at `maxInFlight` / `maxBodyBytesInFlight`
  (`reason="overloaded"`): the HPA is not keeping up, or its ceiling is too low.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from podserve.config.gateway_spec import Gateway
from podserve.kube import conventions as c
from podserve.kube.render.monitoring import label_rule
from podserve.kube.types import Manifest

Meta = Callable[[str], dict[str, Any]]
GATEWAY_LABEL = "gateway"  # the series label naming the Gateway (from the pod's name label)


def _pod_monitor(gw: Gateway, meta: Meta, selector: dict[str, str]) -> Manifest:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": meta(gw.metadata.name),
        "spec": {
            "selector": {"matchLabels": selector},
            "podMetricsEndpoints": [
                {
                    "port": "http",
                    "path": c.METRICS_PATH,
                    "interval": "15s",
                    "relabelings": [label_rule(c.NAME_LABEL, GATEWAY_LABEL)],
                }
            ],
        },
    }


def _rules(gw: Gateway, meta: Meta) -> Manifest:
    name = gw.metadata.name
    sel = f'namespace="{gw.metadata.namespace}",{GATEWAY_LABEL}="{name}"'
    ratio = gw.spec.monitoring.error_ratio
    rules: list[dict[str, Any]] = [
        {
            "alert": "PodserveGatewayStoreUnavailable",
            "expr": f'sum(rate(podserve_gateway_rejections_total{{{sel},reason="store"}}[5m])) > 0',
            "for": "2m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"{name}: requests refused because the gateway's store "
                "(Redis or PostgreSQL) is unavailable"
            },
        },
        {
            "alert": "PodserveGatewayErrorRatioHigh",
            "expr": (
                f'sum(rate(podserve_gateway_requests_total{{{sel},code=~"5.."}}[5m])) '
                f"/ sum(rate(podserve_gateway_requests_total{{{sel}}}[5m])) > {ratio:g}"
            ),
            "for": "10m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"{name}: more than {ratio:.0%} of admitted requests get 5xx "
                "(upstreams failing or none left)"
            },
        },
        {
            "alert": "PodserveGatewayOverloaded",
            "expr": (
                f'sum(rate(podserve_gateway_rejections_total{{{sel},reason="overloaded"}}[5m])) > 0'
            ),
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"{name}: requests refused at maxInFlight; raise maxReplicas or cpu"
            },
        },
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": meta(name),
        "spec": {"groups": [{"name": f"{name}.gateway", "rules": rules}]},
    }


def gateway_monitoring(gw: Gateway, meta: Meta, selector: dict[str, str]) -> list[Manifest]:
    """The PodMonitor and PrometheusRule `spec.monitoring` asks for. `meta(name)`: the
    gateway's object metadata; `selector`: its pods' labels."""
    monitoring = gw.spec.monitoring
    objects: list[Manifest] = []
    if monitoring.pod_monitor:
        objects.append(_pod_monitor(gw, meta, selector))
    if monitoring.rules:
        objects.append(_rules(gw, meta))
    return objects
