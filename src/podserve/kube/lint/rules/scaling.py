"""What an autoscaler reacts to, and how fast in each direction (HPA v2 behavior
semantics and defaults: kubernetes docs "Horizontal Pod Autoscaling", "Default
Behavior"; KEDA passes advanced.horizontalPodAutoscalerConfig.behavior through)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.rules.autoscaling import _behavior
from podserve.kube.types import Severity

_LATENCY = re.compile(
    r"(ttft|time_to_first_token|time_per_output_token|tpot|latency|request_duration|"
    r"e2e_request|duration_seconds|_seconds_bucket|histogram_quantile|p9[059]|p50)",
    re.IGNORECASE,
)
# HPA defaults (pkg/apis/autoscaling/v2/defaults.go): scale-up 0 s window, max of 4 pods
# or 100% per 15 s; scale-down 300 s window, 100% per 15 s.
_DEFAULT_UP: dict[str, Any] = {
    "stabilizationWindowSeconds": 0,
    "selectPolicy": "Max",
    "policies": [
        {"type": "Pods", "value": 4, "periodSeconds": 15},
        {"type": "Percent", "value": 100, "periodSeconds": 15},
    ],
}
_DEFAULT_DOWN: dict[str, Any] = {
    "stabilizationWindowSeconds": 300,
    "selectPolicy": "Max",
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
}


def _signals(doc: Mapping[str, Any]) -> list[str]:
    """Each scaling signal as text: HPA metric names, KEDA trigger queries (cron left out:
    it schedules, it does not measure)."""
    spec = doc.get("spec") or {}
    if doc.get("kind") == "ScaledObject":
        return [
            f"{t.get('type')}:{(t.get('metadata') or {}).get('query', '')}"
            for t in spec.get("triggers") or []
            if isinstance(t, Mapping) and t.get("type") != "cron"
        ]
    names = []
    for metric in spec.get("metrics") or [{"type": "Resource", "resource": {"name": "cpu"}}]:
        kind = str(metric.get("type", ""))
        source = metric.get(kind[:1].lower() + kind[1:]) or {}
        inner = source.get("metric") or {}
        names.append(str(inner.get("name") or source.get("name") or kind))
    return names


def _latency_only(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("HorizontalPodAutoscaler", "ScaledObject"):
        signals = _signals(doc.manifest)
        if signals and all(_LATENCY.search(s) for s in signals):
            field = (
                "spec.triggers" if doc.manifest.get("kind") == "ScaledObject" else "spec.metrics"
            )
            yield Hit(doc, field, "scales on latency alone: " + "; ".join(signals))


LATENCY_ONLY_SCALING_METRIC = Rule(
    id="latency-only-scaling-metric",
    severity=Severity.WARNING,
    title="Autoscaling on latency alone",
    why="Latency (time to first token, request duration, a p95) is a lagging signal: it "
    "rises only after queues have built, a histogram quantile over a rate window trails "
    "by that window, and it falls as soon as new replicas absorb load, so the autoscaler "
    "scales late, then scales down into the next queue. It also saturates: once requests "
    "time out, latency stops growing with demand. Queue depth and in-flight requests "
    "measure demand directly.",
    fix="Scale on queue depth or in-flight requests (podserve_queue_depth, "
    "vllm:num_requests_waiting), and keep latency for alerts or as a second signal.",
    check=_latency_only,
)


def _rate(rules: Mapping[str, Any], replicas: int) -> float:
    """Pods per second the rules allow at `replicas` (selectPolicy over the policies)."""
    select = rules.get("selectPolicy", "Max")
    if select == "Disabled":
        return 0.0
    rates = []
    for policy in rules.get("policies") or []:
        period = max(int(policy.get("periodSeconds", 15)), 1)
        value = float(policy.get("value", 0))
        pods = value if policy.get("type") == "Pods" else value / 100 * replicas
        rates.append(pods / period)
    if not rates:
        return 0.0
    return min(rates) if select == "Min" else max(rates)


def _rules(behavior: Mapping[str, Any] | None, key: str, default: dict[str, Any]) -> dict[str, Any]:
    given = (behavior or {}).get(key) or {}
    return {**default, **given}


def _slower(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("HorizontalPodAutoscaler", "ScaledObject"):
        path, behavior = _behavior(doc.manifest)
        up = _rules(behavior, "scaleUp", _DEFAULT_UP)
        down = _rules(behavior, "scaleDown", _DEFAULT_DOWN)
        target = ctx.target_of(doc)
        top = ctx.max_replicas(target) if target is not None else 10
        up_window = int(up.get("stabilizationWindowSeconds", 0))
        down_window = int(down.get("stabilizationWindowSeconds", 300))
        if up_window > down_window:
            yield Hit(
                doc,
                f"{path}.scaleUp.stabilizationWindowSeconds",
                f"scale-up waits {up_window}s but scale-down only {down_window}s",
            )
        up_rate, down_rate = _rate(up, top), _rate(down, top)
        if up_rate < down_rate:
            yield Hit(
                doc,
                f"{path}.scaleUp.policies",
                f"at {top} replicas scale-up adds at most {up_rate * 60:.1f} pods/min but "
                f"scale-down removes {down_rate * 60:.1f} pods/min",
            )


SCALE_UP_SLOWER_THAN_DOWN = Rule(
    id="scale-up-slower-than-down",
    severity=Severity.WARNING,
    title="Scale-up slower than scale-down",
    why="A model server is cheap to keep and expensive to miss: removing a replica is "
    "instant, adding one costs a cold start of minutes. An autoscaler that waits longer or "
    "moves fewer pods per minute going up than coming down sheds capacity faster than it can "
    "regain it, so every burst queues and every lull overshoots downwards.",
    fix="Keep scale-up eager (short or no stabilization window, e.g. 4 pods or 100% per "
    "15 s) and scale-down conservative (a window above the load time, 1 pod per few "
    "minutes); smooth spikes in the query (a rate or max_over_time window) rather than by "
    "slowing scale-up below scale-down.",
    check=_slower,
)
