"""HorizontalPodAutoscaler and KEDA ScaledObject manifests → typed specs, with the API's
defaults: `behavior` stays nil when absent and gets each missing side's defaults when present
(pkg/apis/autoscaling/v2/defaults.go); ScaledObject defaults from keda-docs
content/docs/2.21/reference/scaledobject-spec.md. What a metric measures is read from its
name or PromQL query (`classify`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from podserve.kube.simulate.fields import as_dict as _dict
from podserve.kube.simulate.fields import as_float as _float
from podserve.kube.simulate.fields import as_list as _list
from podserve.kube.simulate.objects import (
    Behavior,
    Hpa,
    Metric,
    Policy,
    ScaledObject,
    ScaleRules,
    Signal,
)
from podserve.kube.types import Manifest

# autoscaling/v2 defaults when `behavior` is present (pkg/apis/autoscaling/v2/defaults.go).
DEFAULT_SCALE_UP = ScaleRules(0, "Max", (Policy("Pods", 4, 15), Policy("Percent", 100, 15)))
DEFAULT_SCALE_DOWN = ScaleRules(None, "Max", (Policy("Percent", 100, 15),))
# Queue-like KEDA scalers: type → (target key, activation key) in the trigger metadata.
_BACKLOG_TRIGGERS = {
    "redis-streams": ("pendingEntriesCount", "activationLagCount"),
    "kafka": ("lagThreshold", "activationLagThreshold"),
    "rabbitmq": ("value", "activationValue"),
    "aws-sqs-queue": ("queueLength", "activationQueueLength"),
}
_RATE_WINDOW = re.compile(r"\[(\d+)([smh])\]")


def classify(name: str) -> Signal:
    """What a metric name or PromQL query measures (podserve's, vLLM's and Envoy's names)."""
    text = name.lower()
    if "rate(" in text or "irate(" in text or "_rq_total" in text or "requests_total" in text:
        return Signal.RATE
    if "queue" in text or "waiting" in text:
        return Signal.QUEUE
    if any(word in text for word in ("ttft", "latency", "duration", "_seconds")):
        return Signal.LATENCY
    if text in {"cpu"}:
        return Signal.CPU
    return Signal.INFLIGHT


def rate_window_s(query: str) -> int:
    match = _RATE_WINDOW.search(query)
    if match is None:
        return 0
    return int(match[1]) * {"s": 1, "m": 60, "h": 3600}[match[2]]


def _rules(raw: Mapping[str, Any] | None, default: ScaleRules) -> ScaleRules:
    if raw is None:
        return default
    policies = tuple(
        Policy(
            str(_dict(p).get("type")),
            int(_dict(p).get("value", 0)),
            int(_dict(p).get("periodSeconds", 15)),
        )
        for p in _list(raw.get("policies"))
    )
    window = raw.get("stabilizationWindowSeconds")
    tolerance = raw.get("tolerance")
    return ScaleRules(
        window_s=default.window_s if window is None else int(window),
        select=str(raw.get("selectPolicy", default.select)),
        policies=policies or default.policies,
        tolerance=None if tolerance is None else float(str(tolerance)),
    )


def behavior(raw: Any) -> Behavior | None:
    """A nil behavior stays nil; a present one gets each missing side's defaults."""
    if not isinstance(raw, dict):
        return None
    up = raw.get("scaleUp")
    down = raw.get("scaleDown")
    return Behavior(
        _rules(up if isinstance(up, dict) else None, DEFAULT_SCALE_UP),
        _rules(down if isinstance(down, dict) else None, DEFAULT_SCALE_DOWN),
    )


def _hpa_metric(raw: Mapping[str, Any]) -> Metric | None:
    source = str(raw.get("type"))
    body = _dict(raw.get(source[0].lower() + source[1:]))
    target = _dict(body.get("target"))
    kind = str(target.get("type", "AverageValue"))
    if source == "Resource":
        if body.get("name") != "cpu":
            return None
        return Metric("Resource", Signal.CPU, kind, _float(target.get("averageUtilization"), 80))
    if source not in {"Pods", "External"}:
        return None
    name = str(_dict(body.get("metric")).get("name", ""))
    value = target.get("averageValue" if kind == "AverageValue" else "value")
    return Metric(source, classify(name), kind, _float(value, 1.0))


def hpa_object(doc: Manifest) -> Hpa:
    spec = _dict(doc.get("spec"))
    metrics = [_hpa_metric(_dict(m)) for m in _list(spec.get("metrics"))]
    found = tuple(m for m in metrics if m is not None)
    if not _list(spec.get("metrics")):
        found = (Metric("Resource", Signal.CPU, "Utilization", 80.0),)
    return Hpa(
        name=str(_dict(doc.get("metadata")).get("name")),
        target=str(_dict(spec.get("scaleTargetRef")).get("name")),
        min_replicas=int(spec.get("minReplicas", 1)),
        max_replicas=int(spec.get("maxReplicas", 1)),
        metrics=found,
        behavior=behavior(spec.get("behavior")),
    )


def _trigger(raw: Mapping[str, Any]) -> Metric:
    meta = _dict(raw.get("metadata"))
    kind = str(raw.get("metricType", "AverageValue"))
    if raw.get("type") in {"cpu", "memory"}:
        return Metric("Resource", Signal.CPU, "Utilization", _float(meta.get("value"), 80))
    if raw.get("type") == "cron":
        # The cron scaler reports desiredReplicas against a target of 1 per replica.
        return Metric(
            "External",
            Signal.SCHEDULE,
            "AverageValue",
            1.0,
            activation=_float(meta.get("desiredReplicas"), 1.0) - 1.0,
            schedule=(str(meta.get("start", "")), str(meta.get("end", ""))),
        )
    backlog = _BACKLOG_TRIGGERS.get(str(raw.get("type")))
    if backlog is not None:
        # Queue scalers: the backlog (stream lag, pending entries) against a per-replica
        # target (keda-docs content/docs/2.21/scalers/<type>.md).
        target, activation = backlog
        return Metric(
            "External",
            Signal.QUEUE,
            kind,
            _float(meta.get(target), 5.0),
            activation=_float(meta.get(activation), 0.0),
        )
    query = str(meta.get("query", meta.get("metricName", "")))
    return Metric(
        "External",
        classify(query),
        kind,
        _float(meta.get("threshold"), 1.0),
        activation=_float(meta.get("activationThreshold"), 0.0),
        rate_window_s=rate_window_s(query),
    )


def scaled_object(doc: Manifest) -> ScaledObject:
    spec = _dict(doc.get("spec"))
    fallback = _dict(spec.get("fallback"))
    advanced = _dict(_dict(spec.get("advanced")).get("horizontalPodAutoscalerConfig"))
    return ScaledObject(
        name=str(_dict(doc.get("metadata")).get("name")),
        target=str(_dict(spec.get("scaleTargetRef")).get("name")),
        polling_s=int(spec.get("pollingInterval", 30)),
        cooldown_s=int(spec.get("cooldownPeriod", 300)),
        initial_cooldown_s=int(spec.get("initialCooldownPeriod", 0)),
        min_replicas=int(spec.get("minReplicaCount", 0)),
        max_replicas=int(spec.get("maxReplicaCount", 100)),
        triggers=tuple(_trigger(_dict(t)) for t in _list(spec.get("triggers"))),
        fallback_failures=int(fallback["failureThreshold"]) if fallback else None,
        fallback_replicas=int(fallback["replicas"]) if fallback else None,
        behavior=behavior(advanced.get("behavior")),
        fallback_behavior=str(fallback.get("behavior", "static")),
    )
