"""Autoscalers of model servers: the right signal, a long scale-down window, and KEDA
queries that return totals (kubernetes-semantics.md §1, §7)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity

MIN_SCALE_DOWN_WINDOW_S = 600
_DEFAULT_WINDOW_S = 300  # the controller's --horizontal-pod-autoscaler-downscale-stabilization


def _cpu_metric(metrics: list[Mapping[str, Any]]) -> bool:
    if not metrics:
        return True  # an HPA without metrics defaults to CPU utilization 80 (§1.1)
    for metric in metrics:
        kind = metric.get("type")
        source = metric.get("resource") if kind == "Resource" else metric.get("containerResource")
        if kind in {"Resource", "ContainerResource"} and (source or {}).get("name") == "cpu":
            return True
    return False


def _hpa_cpu(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("HorizontalPodAutoscaler"):
        target = ctx.target_of(doc)
        metrics = (doc.manifest.get("spec") or {}).get("metrics") or []
        if target is not None and target.gpu and _cpu_metric(metrics):
            yield Hit(
                doc,
                "spec.metrics",
                f"scales GPU workload {target.kind}/{target.name} on CPU utilization",
            )
    for doc in ctx.of_kind("ScaledObject"):
        target = ctx.target_of(doc)
        triggers = (doc.manifest.get("spec") or {}).get("triggers") or []
        if target is not None and target.gpu and any(t.get("type") == "cpu" for t in triggers):
            yield Hit(
                doc,
                "spec.triggers",
                f"scales GPU workload {target.kind}/{target.name} on a cpu trigger",
            )
    for pod in ctx.pods:
        if pod.kind != "InferenceService" or not pod.gpu:
            continue
        predictor = (pod.manifest.get("spec") or {}).get("predictor") or {}
        metric = predictor.get("scaleMetric")
        mode = pod.annotations.get("serving.kserve.io/deploymentMode", "")
        autoscaler = pod.annotations.get("serving.kserve.io/autoscalerClass", "hpa")
        hpa_default = (
            mode in {"RawDeployment", "Standard"}
            and autoscaler == "hpa"
            and (metric is None and not predictor.get("autoScaling"))
        )
        if metric == "cpu" or hpa_default:
            yield Hit(
                pod.document,
                "spec.predictor.scaleMetric",
                "KServe scales this GPU predictor on CPU (the HPA default)",
            )


HPA_CPU_ON_GPU = Rule(
    id="hpa-cpu-on-gpu",
    severity=Severity.ERROR,
    title="CPU-based autoscaling of a GPU workload",
    why="A GPU model server's CPU sits nearly idle while its GPU queue grows: the autoscaler "
    "never scales up under real load, or scales on tokenization noise. Demand shows in the "
    "queue depth, in-flight requests or time to first token.",
    fix="Scale on a serving metric: HPA Pods metric podserve_queue_depth (via Prometheus "
    "Adapter) or a KEDA prometheus trigger on sum(podserve_queue_depth{...}). If CPU really "
    f"is the bottleneck, silence this rule with the {c.LINT_IGNORE} annotation.",
    check=_hpa_cpu,
)


def _behavior(doc: Mapping[str, Any]) -> tuple[str, Mapping[str, Any] | None]:
    spec = doc.get("spec") or {}
    if doc.get("kind") == "ScaledObject":
        config = (spec.get("advanced") or {}).get("horizontalPodAutoscalerConfig") or {}
        return "spec.advanced.horizontalPodAutoscalerConfig.behavior", config.get("behavior")
    return "spec.behavior", spec.get("behavior")


def _window(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("HorizontalPodAutoscaler", "ScaledObject"):
        path, behavior = _behavior(doc.manifest)
        down = (behavior or {}).get("scaleDown") or {}
        window = down.get("stabilizationWindowSeconds", _DEFAULT_WINDOW_S)
        target = ctx.target_of(doc)
        load = target.annotation_number(c.LOAD_SECONDS) if target is not None else None
        needed = max(MIN_SCALE_DOWN_WINDOW_S, int(load or 0) + 1)
        if isinstance(window, int) and window < needed:
            shown = (
                "the default 300s"
                if behavior is None or "scaleDown" not in behavior
                else (f"{window}s")
            )
            yield Hit(
                doc,
                f"{path}.scaleDown.stabilizationWindowSeconds",
                f"scale-down waits {shown}; a model server needs at least {needed}s",
            )


SCALE_DOWN_WINDOW_SHORT = Rule(
    id="scale-down-window-short",
    severity=Severity.WARNING,
    title="No or short scale-down stabilization window",
    why="A replica that takes minutes to load must not be removed in a short lull only to be "
    "needed again: the autoscaler flaps, each scale-up pays a full cold start, and traffic "
    "queues meanwhile. The window must exceed the load time, and 10 minutes is a sane floor.",
    fix=f"Set behavior.scaleDown.stabilizationWindowSeconds ≥ max({MIN_SCALE_DOWN_WINDOW_S}, "
    "load time) (for KEDA under advanced.horizontalPodAutoscalerConfig.behavior), and keep "
    "scale-up eager.",
    check=_window,
)

_AVERAGE = re.compile(
    r"\b(avg|avg_over_time|quantile|quantile_over_time|histogram_quantile)"
    r"\s*(\(|by\b|without\b)"
)


def _keda_average(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("ScaledObject"):
        triggers = (doc.manifest.get("spec") or {}).get("triggers") or []
        for index, trigger in enumerate(triggers):
            if trigger.get("type") != "prometheus":
                continue
            if trigger.get("metricType", "AverageValue") != "AverageValue":
                continue
            query = str((trigger.get("metadata") or {}).get("query", ""))
            if _AVERAGE.search(query) or re.search(r"/\s*count\s*\(", query):
                yield Hit(
                    doc,
                    f"spec.triggers[{index}].metadata.query",
                    f"AverageValue trigger on an averaged query: {query}",
                )


KEDA_AVERAGE_QUERY = Rule(
    id="keda-average-query",
    severity=Severity.ERROR,
    title="KEDA AverageValue trigger on a query that already averages",
    why="KEDA hands the query result to the HPA as an External AverageValue metric, and the "
    "HPA computes ceil(value / threshold) replicas: the value must be a total over all pods. "
    "An average (or a quantile) divided again by the threshold stays near 1 however many "
    "requests wait — the service never scales out.",
    fix="Return a total (`sum(podserve_queue_depth{...})`) with threshold = the per-pod "
    "target, or use metricType: Value for quantities that do not add up (latencies).",
    check=_keda_average,
)
