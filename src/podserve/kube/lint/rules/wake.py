"""Scale to zero: something must be able to wake the service, and the wait must be
bearable. KEDA activates a ScaledObject at 0 replicas when any trigger reports a value
above its activationThreshold (keda docs concepts/scaling-deployments, "Activating and
scaling thresholds"); a Prometheus query on series the service's own pods or upstream
endpoints produce stays empty or flat while there are none."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.types import Severity

SLOW_LOAD_S = 60  # common client and load-balancer timeouts (AWS ALB idle 60 s)

# Series that exist or move only when the service has ready endpoints: the pods' own
# metrics (podserve, vLLM, TGI, DCGM per pod) and Envoy's per-upstream request counters.
# With no healthy host Envoy answers 503 "no healthy upstream" locally and counts
# `upstream_cx_none_healthy`; the upstream request counters never see the request
# (envoyproxy/envoy source/common/router/router.cc, docs "Cluster statistics").
_NEEDS_ENDPOINTS = re.compile(
    r"\b(podserve_\w+|vllm:\w+|tgi_\w+|sglang:\w+|DCGM_FI_\w+|"
    r"envoy_cluster_upstream_rq\w*|envoy_cluster_upstream_cx_(?!none_healthy)\w+)"
)
_METRIC = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?=\s*[{\[(]|\s*$|\s*[)}\],])")
_FUNCTIONS = {
    "sum", "rate", "irate", "increase", "avg", "max", "min", "count", "by", "without",
    "histogram_quantile", "sum_over_time", "avg_over_time", "max_over_time", "clamp_min",
    "clamp_max", "vector", "scalar", "abs", "ceil", "floor", "round", "delta", "deriv",
    "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "le",
    "quantile", "topk", "bottomk", "label_replace", "absent", "time",
}  # fmt: skip


_NAME_MATCHER = re.compile(r"""__name__\s*(=~|=)\s*(["'])(.*?)\2""")
_PLAIN_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def metrics_in(query: str) -> set[str]:
    """Metric names a PromQL query reads (label matchers and functions left out), including
    those a `{__name__=~"a|b"}` selector names; a `__name__` regex that is not a plain
    alternation of names yields `?`, a metric this module cannot judge."""
    named: set[str] = set()
    for op, _, value in _NAME_MATCHER.findall(query):
        options = value.split("|") if op == "=~" else [value]
        if all(_PLAIN_NAME.fullmatch(o) for o in options):
            named.update(options)
        else:
            named.add("?")
    stripped = re.sub(r"\{[^}]*\}", "{}", query)
    stripped = re.sub(r"\[[^\]]*\]", "[]", stripped)
    stripped = re.sub(r""""[^"]*"|'[^']*'""", '""', stripped)
    # Label lists of aggregations and vector matching name labels, not metrics.
    stripped = re.sub(
        r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", stripped
    )
    found = {m for m in _METRIC.findall(stripped) if m not in _FUNCTIONS and not m.isdigit()}
    return found | named


def min_replica_count(spec: Mapping[str, Any]) -> int:
    value = spec.get("minReplicaCount", 0)  # KEDA's default floor is 0
    return value if isinstance(value, int) else 0


def _trigger_needs_endpoints(trigger: Mapping[str, Any]) -> bool:
    if trigger.get("type") != "prometheus":
        return False  # cron, queues, external event sources wake whatever the endpoints
    query = str((trigger.get("metadata") or {}).get("query", ""))
    names = metrics_in(query)
    return bool(names) and all(_NEEDS_ENDPOINTS.fullmatch(n) for n in names)


def _needs_endpoints(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("ScaledObject"):
        spec = doc.manifest.get("spec") or {}
        if min_replica_count(spec) > 0:
            continue
        triggers = [t for t in spec.get("triggers") or [] if isinstance(t, Mapping)]
        if triggers and all(_trigger_needs_endpoints(t) for t in triggers):
            names = sorted(
                n
                for t in triggers
                for n in metrics_in(str((t.get("metadata") or {}).get("query", "")))
            )
            yield Hit(
                doc,
                "spec.triggers",
                f"at 0 replicas every trigger reads {', '.join(names)}, which only move "
                "while the service has endpoints: nothing can wake it",
            )


ACTIVATION_METRIC_NEEDS_ENDPOINTS = Rule(
    id="activation-metric-needs-endpoints",
    severity=Severity.ERROR,
    title="Scale-to-zero wakes on a metric that needs running pods",
    why="At zero replicas the service's own metrics (podserve_*, vllm:*) do not exist, and "
    "Envoy answers requests for a cluster without healthy hosts with a local 503 (`no "
    "healthy upstream`), counting upstream_cx_none_healthy instead of "
    "envoy_cluster_upstream_rq_total. A KEDA trigger on those series reads 0 forever at 0 "
    "replicas, so the activation threshold is never crossed and the service never wakes.",
    fix="Wake on a signal that counts requests whatever the endpoints: the gateway's "
    "downstream or per-route request count, envoy_cluster_upstream_cx_none_healthy (503s), "
    "a queue length, a cron window, or the KEDA HTTP add-on's interceptor (which also holds "
    "requests during the cold start).",
    check=_needs_endpoints,
)


def _slow(ctx: LintContext) -> Iterator[Hit]:
    for doc in ctx.of_kind("ScaledObject", "HorizontalPodAutoscaler"):
        spec = doc.manifest.get("spec") or {}
        floor = (
            min_replica_count(spec)
            if doc.manifest.get("kind") == "ScaledObject"
            else spec.get("minReplicas", 1)
        )
        target = ctx.target_of(doc)
        if floor != 0 or target is None:
            continue
        load = target.annotation_number(c.LOAD_SECONDS)
        if load is None:
            budget = _startup_budget(target.pod)
            load = float(budget) if budget else None
        if load is not None and load > SLOW_LOAD_S:
            yield Hit(
                doc,
                "spec.minReplicaCount",
                f"scales {target.kind}/{target.name} to zero, and its model takes "
                f"{load:.0f}s to load (plus node provisioning for a GPU): the first "
                "request after idle waits that long or fails",
            )


def _startup_budget(pod: Mapping[str, Any]) -> int | None:
    for ctr in pod.get("containers") or []:
        probe = ctr.get("startupProbe") if isinstance(ctr, Mapping) else None
        if isinstance(probe, Mapping):
            return int(probe.get("periodSeconds", 10)) * int(probe.get("failureThreshold", 3))
    return None


SCALE_TO_ZERO_SLOW_MODEL = Rule(
    id="scale-to-zero-slow-model",
    severity=Severity.WARNING,
    title="Scale to zero for a model that loads slowly",
    why="Waking from zero costs the whole cold start: node provisioning for a GPU "
    "(minutes), image pull, weight fetch and load. Requests that arrive meanwhile fail "
    "(Envoy answers 503 while there are no endpoints) unless something holds them, and "
    "anything held longer than a client's or load balancer's timeout (often 60 s) fails "
    "anyway. Interactive paths need at least one warm replica.",
    fix="Keep min 1 for interactive services (scale to zero only off hours with a cron "
    "window, or for batch/queue consumers that tolerate the wait), or put a holding proxy "
    "(KEDA HTTP add-on interceptor) in front with timeouts above the cold start.",
    check=_slow,
)
