"""Manifests → `Scenario`: the fields of Deployments, StatefulSets, PodDisruptionBudgets,
HorizontalPodAutoscalers, ScaledObjects, PriorityClasses and HTTPRoutes that the controllers
act on, with the API server's defaults filled in where the manifest leaves a field out
(kubernetes/kubernetes pkg/apis/apps/v1/defaults.go, pkg/apis/core/v1/defaults.go,
pkg/apis/autoscaling/v2/defaults.go; kedacore/keda-docs content/docs/2.21/reference/
scaledobject-spec.md)."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from podserve.kube.simulate.autoscalers import hpa_object, scaled_object
from podserve.kube.simulate.fields import as_dict as _dict
from podserve.kube.simulate.fields import as_float as _float
from podserve.kube.simulate.fields import as_list as _list
from podserve.kube.simulate.objects import (
    Pdb,
    PodTemplate,
    Requirement,
    Scenario,
    ServingParams,
    SpreadConstraint,
    Toleration,
    Workload,
)
from podserve.kube.simulate.resources import Amounts, amounts
from podserve.kube.types import Manifest

# Built-in PriorityClasses (pkg/apis/scheduling/types.go SystemCriticalPriority).
BUILTIN_PRIORITIES = {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
DEFAULT_GRACE_S = 30.0  # pkg/apis/core/v1/defaults.go SetDefaults_PodSpec
_SLEEP = re.compile(r"sleep\s+(\d+(\.\d+)?)")

ServingFor = Callable[[Manifest, PodTemplate], ServingParams | None]


def _requests(spec: Mapping[str, Any]) -> Amounts:
    """Effective pod request: max(sum of app containers, largest init container), each
    container's limits defaulting its missing requests (pkg/api/v1/resource/helpers.go
    `PodRequests`; pkg/apis/core/v1/defaults.go `SetDefaults_ResourceList` on pods)."""

    def one(container: Mapping[str, Any]) -> Amounts:
        res = _dict(container.get("resources"))
        merged = {**_dict(res.get("limits")), **_dict(res.get("requests"))}
        return amounts(merged)

    total: Amounts = {}
    for container in _list(spec.get("containers")):
        for k, v in one(_dict(container)).items():
            total[k] = total.get(k, 0) + v
    for container in _list(spec.get("initContainers")):
        for k, v in one(_dict(container)).items():
            total[k] = max(total.get(k, 0), v)
    return total


def _pre_stop_s(container: Mapping[str, Any]) -> float:
    pre_stop = _dict(_dict(container.get("lifecycle")).get("preStop"))
    if "sleep" in pre_stop:
        return _float(_dict(pre_stop["sleep"]).get("seconds"), 0.0)
    command = " ".join(str(c) for c in _list(_dict(pre_stop.get("exec")).get("command")))
    match = _SLEEP.search(command)
    return float(match[1]) if match else 0.0


def _startup_budget_s(container: Mapping[str, Any]) -> float | None:
    """initialDelaySeconds + failureThreshold x periodSeconds: after that the kubelet kills
    the container (probe defaults from pkg/apis/core/v1/defaults.go SetDefaults_Probe)."""
    probe = container.get("startupProbe")
    if not isinstance(probe, dict):
        return None
    delay = _float(probe.get("initialDelaySeconds"), 0.0)
    return delay + _float(probe.get("failureThreshold"), 3.0) * _float(
        probe.get("periodSeconds"), 10.0
    )


def _tolerations(spec: Mapping[str, Any]) -> tuple[Toleration, ...]:
    out = []
    for raw in _list(spec.get("tolerations")):
        t = _dict(raw)
        out.append(
            Toleration(
                key=str(t.get("key", "")),
                operator=str(t.get("operator", "Equal")),
                value=str(t.get("value", "")),
                effect=str(t.get("effect", "")),
            )
        )
    return tuple(out)


def _affinity_terms(spec: Mapping[str, Any]) -> tuple[tuple[Requirement, ...], ...]:
    node = _dict(_dict(spec.get("affinity")).get("nodeAffinity"))
    required = _dict(node.get("requiredDuringSchedulingIgnoredDuringExecution"))
    terms = []
    for term in _list(required.get("nodeSelectorTerms")):
        reqs = tuple(
            Requirement(
                key=str(_dict(e).get("key", "")),
                operator=str(_dict(e).get("operator", "In")),
                values=tuple(str(v) for v in _list(_dict(e).get("values"))),
            )
            for e in _list(_dict(term).get("matchExpressions"))
        )
        terms.append(reqs)
    return tuple(terms)


def _spread(spec: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[SpreadConstraint, ...]:
    out = []
    for raw in _list(spec.get("topologySpreadConstraints")):
        c = _dict(raw)
        selector = _dict(_dict(c.get("labelSelector")).get("matchLabels")) or dict(labels)
        out.append(
            SpreadConstraint(
                max_skew=int(c.get("maxSkew", 1)),
                topology_key=str(c.get("topologyKey", "kubernetes.io/hostname")),
                hard=c.get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule",
                selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
            )
        )
    return tuple(out)


def pod_template(
    template: Mapping[str, Any], priorities: Mapping[str, tuple[int, bool]]
) -> PodTemplate:
    meta = _dict(template.get("metadata"))
    spec = _dict(template.get("spec"))
    labels = {str(k): str(v) for k, v in _dict(meta.get("labels")).items()}
    annotations = _dict(meta.get("annotations"))
    containers = [_dict(c) for c in _list(spec.get("containers"))]
    main = containers[0] if containers else {}
    class_name = str(spec.get("priorityClassName", ""))
    priority, preempts = priorities.get(class_name, (BUILTIN_PRIORITIES.get(class_name, 0), True))
    if "priority" in spec:
        priority = int(spec["priority"])
    if spec.get("preemptionPolicy") == "Never":
        preempts = False
    volumes = {str(_dict(v).get("name")): _dict(v) for v in _list(spec.get("volumes"))}
    fetches = any(
        "fetch" in [str(a) for a in _list(_dict(c).get("args"))]
        for c in _list(spec.get("initContainers"))
    )
    return PodTemplate(
        labels=labels,
        requests=_requests(spec),
        node_selector={str(k): str(v) for k, v in _dict(spec.get("nodeSelector")).items()},
        affinity_terms=_affinity_terms(spec),
        tolerations=_tolerations(spec),
        spread=_spread(spec, labels),
        priority=priority,
        preempts=preempts,
        grace_s=_float(spec.get("terminationGracePeriodSeconds"), DEFAULT_GRACE_S),
        pre_stop_s=max((_pre_stop_s(c) for c in containers), default=0.0),
        startup_budget_s=_startup_budget_s(main),
        load_s=_float(annotations.get("podserve.dev/load-seconds"), 0.0),
        model_size_gb=_float(annotations.get("podserve.dev/model-size-gi"), 0.0) * 1.073741824,
        fetches=fetches,
        shared_cache="hostPath" in volumes.get("cache", {}),
        image=str(main.get("image", "")),
        serves=any(c.get("readinessProbe") and c.get("ports") for c in containers),
    )


def _int_or_percent(value: Any, default: int | str) -> int | str:
    if value is None:
        return default
    return value if isinstance(value, str) and value.endswith("%") else int(value)


def _workload(
    doc: Manifest, priorities: Mapping[str, tuple[int, bool]], serving_for: ServingFor
) -> Workload:
    spec = _dict(doc.get("spec"))
    kind = str(doc["kind"])
    template = pod_template(_dict(spec.get("template")), priorities)
    if kind == "Deployment":
        strategy = _dict(spec.get("strategy"))
        rolling = _dict(strategy.get("rollingUpdate"))
        strategy_type = str(strategy.get("type", "RollingUpdate"))
        surge = _int_or_percent(rolling.get("maxSurge"), "25%")
        unavailable = _int_or_percent(rolling.get("maxUnavailable"), "25%")
    else:
        strategy = _dict(spec.get("updateStrategy"))
        strategy_type = str(strategy.get("type", "RollingUpdate"))
        surge = 0
        unavailable = _int_or_percent(_dict(strategy.get("rollingUpdate")).get("maxUnavailable"), 1)
    return Workload(
        kind=kind,
        name=str(_dict(doc.get("metadata")).get("name")),
        replicas=int(spec.get("replicas", 1)),
        strategy=strategy_type,
        max_surge=surge,
        max_unavailable=unavailable,
        min_ready_s=_float(spec.get("minReadySeconds"), 0.0),
        progress_deadline_s=_float(spec.get("progressDeadlineSeconds"), 600.0),
        parallel=spec.get("podManagementPolicy") == "Parallel",
        template=template,
        serving=serving_for(doc, template) if template.serves else None,
    )


def _pdb(doc: Manifest) -> Pdb:
    spec = _dict(doc.get("spec"))
    selector = _dict(_dict(spec.get("selector")).get("matchLabels"))
    raw_min, raw_max = spec.get("minAvailable"), spec.get("maxUnavailable")
    return Pdb(
        name=str(_dict(doc.get("metadata")).get("name")),
        selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        min_available=None if raw_min is None else _int_or_percent(raw_min, 0),
        max_unavailable=None if raw_max is None else _int_or_percent(raw_max, 0),
        always_allow_unhealthy=spec.get("unhealthyPodEvictionPolicy") == "AlwaysAllow",
    )


def matches(
    selector: Sequence[tuple[str, str]] | Mapping[str, str], labels: Mapping[str, str]
) -> bool:
    pairs = selector.items() if isinstance(selector, Mapping) else selector
    return all(labels.get(k) == v for k, v in pairs)


def _traffic_weights(docs: Sequence[Manifest], workloads: Sequence[Workload]) -> dict[str, float]:
    """Share of the offered traffic per serving workload: HTTPRoute backendRef weights
    (default 1; gateway-api apis/v1/shared_types.go BackendRef) through each Service's
    selector; without a route, serving workloads share equally."""
    serving = [w for w in workloads if w.serving is not None]
    services = {
        str(_dict(d.get("metadata")).get("name")): _dict(_dict(d.get("spec")).get("selector"))
        for d in docs
        if d.get("kind") == "Service"
    }
    weights: dict[str, float] = {}
    for doc in docs:
        if doc.get("kind") != "HTTPRoute":
            continue
        for rule in _list(_dict(doc.get("spec")).get("rules")):
            for ref in _list(_dict(rule).get("backendRefs")):
                selector = services.get(str(_dict(ref).get("name")))
                if not selector:
                    continue
                for w in serving:
                    if matches(selector, w.template.labels):
                        weights[w.name] = weights.get(w.name, 0.0) + _float(
                            _dict(ref).get("weight"), 1.0
                        )
    if not weights:
        weights = {w.name: 1.0 for w in serving}
    total = sum(weights.values())
    return {name: value / total for name, value in weights.items()} if total else {}


SIMULATED = {
    "Deployment",
    "StatefulSet",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "ScaledObject",
    "PriorityClass",
    "HTTPRoute",
    "Service",
    "ConfigMap",
}


def scenario(docs: Sequence[Manifest], serving_for: ServingFor) -> Scenario:
    priorities = {
        str(_dict(d.get("metadata")).get("name")): (
            int(d.get("value", 0)),
            d.get("preemptionPolicy", "PreemptLowerPriority") != "Never",
        )
        for d in docs
        if d.get("kind") == "PriorityClass"
    }
    workloads = tuple(
        _workload(d, priorities, serving_for)
        for d in docs
        if d.get("kind") in {"Deployment", "StatefulSet"}
    )
    ignored = sorted({str(d.get("kind")) for d in docs if d.get("kind") not in SIMULATED})
    return Scenario(
        workloads=workloads,
        pdbs=tuple(_pdb(d) for d in docs if d.get("kind") == "PodDisruptionBudget"),
        hpas=tuple(hpa_object(d) for d in docs if d.get("kind") == "HorizontalPodAutoscaler"),
        scaled_objects=tuple(scaled_object(d) for d in docs if d.get("kind") == "ScaledObject"),
        traffic_weights=_traffic_weights(docs, workloads),
        ignored=tuple(ignored),
    )
