"""PodMonitor (scrape /metrics on the http port, adding `service` and `track` labels so
queries can tell stable from canary) and a PrometheusRule with the serving alerts."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.render.variant import metadata
from podserve.kube.types import Manifest


def label_rule(pod_label: str, target: str) -> dict[str, Any]:
    """A relabeling copying a pod label into a series label."""
    source = "__meta_kubernetes_pod_label_" + "".join(
        ch if ch.isalnum() else "_" for ch in pod_label
    )
    return {"action": "replace", "sourceLabels": [source], "targetLabel": target}


def metrics_pod_monitor(
    service: ModelService,
    name: str,
    selector: dict[str, str],
    port: str,
    labels: dict[str, str],
) -> Manifest:
    """A PodMonitor scraping /metrics on the named container port of the pods `selector`
    picks, copying each pod label in `labels` (pod label -> series label). The operator
    turns `port` into a `keep` on `__meta_kubernetes_pod_container_port_name`
    (prometheus-operator pkg/prometheus/promcfg.go, generatePodMonitorConfig), so a
    selected pod without that port name is no target."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": metadata(service, name, "monitoring"),
        "spec": {
            "selector": {"matchLabels": selector},
            "podMetricsEndpoints": [
                {
                    "port": port,
                    "path": c.METRICS_PATH,
                    "interval": "15s",
                    "relabelings": [label_rule(pod, to) for pod, to in labels.items()],
                }
            ],
        },
    }


def pod_monitor(service: ModelService) -> Manifest:
    return metrics_pod_monitor(
        service,
        service.metadata.name,
        {c.NAME_LABEL: service.metadata.name},
        "http",
        {c.NAME_LABEL: "service", c.TRACK_LABEL: "track"},
    )


def prometheus_rule(service: ModelService) -> Manifest:
    spec = service.spec
    sel = f'namespace="{service.metadata.namespace}",service="{service.metadata.name}"'
    name = service.metadata.name
    rules: list[dict[str, Any]] = []
    if spec.model.generative:
        rules.append(
            {
                "alert": "PodserveTTFTP99High",
                "expr": (
                    "histogram_quantile(0.99, sum by (le, track) "
                    f"(rate(podserve_time_to_first_token_seconds_bucket{{{sel}}}[5m]))) "
                    f"> {spec.monitoring.ttft_p99_seconds:g}"
                ),
                "for": "10m",
                "labels": {"severity": "warning"},
                "annotations": {
                    "summary": f"{name}: time to first token p99 above "
                    f"{spec.monitoring.ttft_p99_seconds:g}s"
                },
            }
        )
    rules += [
        {
            "alert": "PodserveErrorRatioHigh",
            "expr": (
                f'sum by (track) (rate(podserve_requests_total{{{sel},code=~"5.."}}[5m])) '
                f"/ sum by (track) (rate(podserve_requests_total{{{sel}}}[5m])) "
                f"> {spec.monitoring.error_ratio:g}"
            ),
            "for": "10m",
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": f"{name}: more than {spec.monitoring.error_ratio:.0%} of requests fail"
            },
        },
        {
            "alert": "PodserveReadinessFlapping",
            "expr": f"max by (pod) (changes(podserve_ready{{{sel}}}[15m])) > 4",
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"{name}: a pod's readiness flips repeatedly "
                "(overload or a failing device)"
            },
        },
        {
            "alert": "PodserveQueueSaturated",
            "expr": (
                f"max by (pod) (podserve_queue_depth{{{sel}}}) / {spec.serving.max_queue} > 0.8"
            ),
            "for": "5m",
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": f"{name}: queues above 80% of maxQueue; requests will be shed with 503"
            },
        },
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": metadata(service, service.metadata.name, "monitoring"),
        "spec": {"groups": [{"name": f"{name}.serving", "rules": rules}]},
    }


def monitoring_objects(service: ModelService) -> list[Manifest]:
    result = []
    if service.spec.monitoring.pod_monitor:
        result.append(pod_monitor(service))
    if service.spec.monitoring.rules:
        result.append(prometheus_rule(service))
    return result
