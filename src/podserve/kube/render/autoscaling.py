"""The autoscaler: HPA v2 on a Pods metric served by Prometheus Adapter, or a KEDA
ScaledObject on a Prometheus query. Scale-up waits out a short window on GPU models (a spike
shorter than it buys no nodes), scale-down a window longer than a model load
(kubernetes-semantics.md §1.5, §7). KEDA semantics cited below are from kedacore/keda-docs
content/docs/2.21/reference/scaledobject-spec.md and scalers/cron.md."""

from __future__ import annotations

from typing import Any

import yaml

from podserve.config.model_service import (
    Autoscaling,
    ModelService,
    ScalingEngine,
    ScalingMetric,
)
from podserve.kube import conventions as c
from podserve.kube.plan import FALLBACK_FAILURES, Plan, fallback_replicas
from podserve.kube.render.variant import Variant, metadata
from podserve.kube.types import Manifest

# Per-pod metric the HPA reads through Prometheus Adapter, per scaling metric.
POD_METRICS = {
    ScalingMetric.QUEUE_DEPTH: "podserve_queue_depth",
    ScalingMetric.INFLIGHT: "podserve_inflight_requests",
    ScalingMetric.TTFT_P95: "podserve_ttft_p95_seconds",
}
LINT_IGNORE_CPU = "hpa-cpu-on-gpu"


def behavior(plan: Plan) -> dict[str, Any]:
    return {
        "scaleUp": {
            # The HPA acts on the lowest recommendation within this window.
            "stabilizationWindowSeconds": plan.scale_up_window_s,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": plan.scale_down_window_s,
            "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 120}],
        },
    }


def _target_ref(service: ModelService, variant: Variant) -> dict[str, str]:
    return {"apiVersion": "apps/v1", "kind": service.spec.workload, "name": variant.name}


def _cpu_annotations(service: ModelService, scaling: Autoscaling) -> dict[str, str] | None:
    if scaling.metric is ScalingMetric.CPU and service.spec.gpu.count:
        # forceCpu was set on purpose; render printed the warning, lint should not fail it.
        return {
            c.LINT_IGNORE: LINT_IGNORE_CPU,
            c.LINT_IGNORE_REASON: "autoscaling.forceCpu in the ModelService",
        }
    return None


def hpa(service: ModelService, variant: Variant, plan: Plan, scaling: Autoscaling) -> Manifest:
    if scaling.metric is ScalingMetric.CPU:
        metric: dict[str, Any] = {
            "type": "Resource",
            "resource": {
                "name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": int(float(scaling.target))},
            },
        }
    else:
        metric = {
            "type": "Pods",
            "pods": {
                "metric": {"name": POD_METRICS[scaling.metric]},
                "target": {"type": "AverageValue", "averageValue": scaling.target},
            },
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": metadata(
            service, variant.name, "autoscaler", variant.track, _cpu_annotations(service, scaling)
        ),
        "spec": {
            "scaleTargetRef": _target_ref(service, variant),
            "minReplicas": max(1, service.spec.replicas.min),
            "maxReplicas": service.spec.replicas.max,
            "metrics": [metric],
            "behavior": behavior(plan),
        },
    }


def series_selector(service: ModelService, track: str) -> str:
    """Label matchers for one variant's series (labels added by the PodMonitor)."""
    return (
        f'namespace="{service.metadata.namespace}",service="{service.metadata.name}",'
        f'track="{track}"'
    )


def _keda_trigger(service: ModelService, variant: Variant, scaling: Autoscaling) -> dict[str, Any]:
    if scaling.metric is ScalingMetric.CPU:
        return {
            "type": "cpu",
            "metricType": "Utilization",
            "metadata": {"value": str(int(float(scaling.target)))},
        }
    where = series_selector(service, variant.track)
    if scaling.metric is ScalingMetric.TTFT_P95:
        # A latency is not additive: the HPA's External Value path scales by v/target x ready
        # pods, where AverageValue would divide a quantile by the target (§1.3).
        query = (
            "histogram_quantile(0.95, sum by (le) "
            f"(rate(podserve_time_to_first_token_seconds_bucket{{{where}}}[2m])))"
        )
        metric_type = "Value"
    else:
        # KEDA's AverageValue path computes ceil(value / threshold): the query must return
        # the total over all pods, never a per-pod average (§7).
        query = f"sum({POD_METRICS[scaling.metric]}{{{where}}})"
        metric_type = "AverageValue"
    return {
        "type": "prometheus",
        "name": scaling.metric.value,
        "metricType": metric_type,
        "metadata": {
            "serverAddress": scaling.prometheus_address,
            "query": query,
            "threshold": scaling.target,
            "activationThreshold": "0",
        },
    }


# With no per-replica target, the wake signal asks for ceil(value / this) = 1 replica
# while there is any demand: it wakes the service and keeps one pod, the main metric scales.
WAKE_ONLY_TARGET = "1000000"


def _activation_trigger(scaling: Autoscaling) -> dict[str, Any]:
    activation = scaling.activation
    assert activation is not None
    return {
        "type": "prometheus",
        "name": "activation",
        "metricType": "AverageValue",
        "metadata": {
            "serverAddress": scaling.prometheus_address,
            "query": activation.query,
            "threshold": activation.target or WAKE_ONLY_TARGET,
            # 0 -> 1 happens when the value is strictly above activationThreshold; at 1+
            # replicas KEDA ignores it and the HPA uses `threshold`.
            "activationThreshold": activation.threshold,
        },
    }


def _cron_triggers(service: ModelService, scaling: Autoscaling) -> list[dict[str, Any]]:
    """One KEDA cron trigger per active window: replicas.min inside it, and outside all
    of them the ScaledObject's minReplicaCount 0 applies (the queue trigger cannot wake a
    service with no pods, so it stays at zero off hours)."""
    return [
        {
            "type": "cron",
            "name": f"active-hours-{index}",
            "metadata": {
                "timezone": window.timezone,
                "start": window.start,
                "end": window.end,
                "desiredReplicas": str(service.spec.replicas.min),
            },
        }
        for index, window in enumerate(scaling.active_hours)
    ]


def scaled_object(
    service: ModelService, variant: Variant, plan: Plan, scaling: Autoscaling
) -> Manifest:
    triggers = [_keda_trigger(service, variant, scaling)]
    if scaling.activation is not None:
        triggers.append(_activation_trigger(scaling))
    triggers += _cron_triggers(service, scaling)
    floor = 0 if scaling.active_hours else service.spec.replicas.min
    body: dict[str, Any] = {
        "scaleTargetRef": _target_ref(service, variant),
        "pollingInterval": scaling.polling_interval_seconds,
        # cooldownPeriod applies only to the last replica (1 -> 0); N -> 1 follows the
        # HPA behavior below (§7).
        "cooldownPeriod": plan.scale_down_window_s,
        "minReplicaCount": floor,
        "maxReplicaCount": service.spec.replicas.max,
    }
    if scaling.metric is not ScalingMetric.CPU:
        # After failureThreshold failed reads KEDA feeds the HPA a metric that lands on
        # `replicas`; currentReplicasIfHigher keeps a larger current count, so a broken
        # metrics pipeline neither pins the service at its minimum nor scales it down
        # blind. Not allowed with cpu/memory triggers. Since KEDA 2.17 (`behavior` needs it)
        # this is the only path: the executor no longer sets fallback.replicas itself
        # (kedacore/keda#6520), and at 0 replicas the HPA is inactive, so fallback does not
        # wake a service at zero (pkg/fallback/fallback.go GetMetricsWithFallback;
        # pkg/scaling/executor/scale_scaledobjects.go RequestScale; docs/kubernetes.md).
        body["fallback"] = {
            "failureThreshold": FALLBACK_FAILURES,
            "replicas": fallback_replicas(service.spec),
            "behavior": "currentReplicasIfHigher",
        }
    body["advanced"] = {
        "horizontalPodAutoscalerConfig": {
            "name": f"keda-hpa-{variant.name}",
            "behavior": behavior(plan),
        },
    }
    body["triggers"] = triggers
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(
            service, variant.name, "autoscaler", variant.track, _cpu_annotations(service, scaling)
        ),
        "spec": body,
    }


def adapter_rules(service: ModelService, scaling: Autoscaling) -> Manifest:
    """Prometheus Adapter rule exposing the HPA's metric per pod. The adapter reads one
    config; merge `rules` from this ConfigMap into it (docs/kubernetes.md)."""
    name = POD_METRICS[scaling.metric]
    overrides = {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}
    if scaling.metric is ScalingMetric.TTFT_P95:
        rule: dict[str, Any] = {
            "seriesQuery": 'podserve_time_to_first_token_seconds_bucket{namespace!="",pod!=""}',
            "resources": {"overrides": overrides},
            "name": {"matches": "^podserve_time_to_first_token_seconds_bucket$", "as": name},
            "metricsQuery": (
                "histogram_quantile(0.95, sum(rate(<<.Series>>{<<.LabelMatchers>>}"
                "[2m])) by (le, <<.GroupBy>>))"
            ),
        }
    else:
        rule = {
            "seriesQuery": f'{name}{{namespace!="",pod!=""}}',
            "resources": {"overrides": overrides},
            "name": {"matches": f"^{name}$", "as": name},
            "metricsQuery": "sum(<<.Series>>{<<.LabelMatchers>>}) by (<<.GroupBy>>)",
        }
    text = yaml.safe_dump({"rules": [rule]}, sort_keys=True, width=4096)
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(service, f"{service.metadata.name}-adapter-rules", "autoscaler"),
        "data": {"rules.yaml": text},
    }


def autoscaler_objects(service: ModelService, variant: Variant, plan: Plan) -> list[Manifest]:
    scaling = service.spec.autoscaling
    if scaling is None or variant.fixed_replicas is not None:
        return []
    if scaling.engine is ScalingEngine.KEDA:
        return [scaled_object(service, variant, plan, scaling)]
    result = [hpa(service, variant, plan, scaling)]
    if scaling.metric is not ScalingMetric.CPU:
        result.append(adapter_rules(service, scaling))
    return result
