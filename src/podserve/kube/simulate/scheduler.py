"""The kube-scheduler's filter, score and preemption for one pod, on the simulator's nodes.

Filters run in the default profile's order and a node's first failing plugin gives its
reason (pkg/scheduler/apis/config/v1/default_plugins.go; pkg/scheduler/framework/runtime/
framework.go RunFilterPlugins): NodeUnschedulable, TaintToleration, NodeAffinity,
NodeResourcesFit, PodTopologySpread. The message of a pod no node fits is FitError's
(pkg/scheduler/framework/types.go): "0/N nodes are available: " + sorted "count reason"
pairs, e.g. "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from podserve.kube.simulate.cluster import Taint
from podserve.kube.simulate.manifests import matches
from podserve.kube.simulate.objects import PodTemplate, Requirement, SpreadConstraint, Toleration
from podserve.kube.simulate.resources import CPU, MEMORY, PODS, Amounts, insufficient, is_gpu
from podserve.kube.simulate.state import Node, Phase, Pod

UNSCHEDULABLE = "node(s) were unschedulable"  # nodeunschedulable.ErrReasonUnschedulable
AFFINITY = "node(s) didn't match Pod's node affinity/selector"  # nodeaffinity.ErrReasonPod
SPREAD = "node(s) didn't match pod topology spread constraints"  # podtopologyspread
TOO_MANY_PODS = "Too many pods"  # noderesources fit.go
HOSTNAME = "kubernetes.io/hostname"


def tolerates(tolerations: Iterable[Toleration], taint: Taint) -> bool:
    """v1.Toleration.ToleratesTaint (staging/src/k8s.io/api/core/v1/toleration.go)."""
    for t in tolerations:
        if t.effect and t.effect != taint.effect:
            continue
        if t.key and t.key != taint.key:
            continue
        if t.operator == "Exists" or (t.operator in {"Equal", ""} and t.value == taint.value):
            return True
    return False


def extended_tolerations(requests: Mapping[str, int]) -> tuple[Toleration, ...]:
    """ExtendedResourceToleration admission: a pod requesting resource R tolerates
    `R:NoSchedule` (plugin/pkg/admission/extendedresourcetoleration/admission.go)."""
    return tuple(
        Toleration(name, "Exists", "", "NoSchedule")
        for name, value in sorted(requests.items())
        if value > 0 and "/" in name and not name.startswith("kubernetes.io/")
    )


def _requirement(req: Requirement, labels: Mapping[str, str]) -> bool:
    # k8s.io/component-helpers/scheduling/corev1/nodeaffinity: NodeSelectorRequirementsAsSelector
    value = labels.get(req.key)
    op = req.operator
    if op == "In":
        return value is not None and value in req.values
    if op == "NotIn":
        return value is None or value not in req.values
    if op == "Exists":
        return value is not None
    if op == "DoesNotExist":
        return value is None
    if op in {"Gt", "Lt"} and value is not None and req.values:
        try:
            left, right = int(value), int(req.values[0])
        except ValueError:
            return False
        return left > right if op == "Gt" else left < right
    return False


def node_matches(template: PodTemplate, labels: Mapping[str, str]) -> bool:
    """nodeSelector (AND of exact matches) and required node affinity (OR of terms, AND of
    expressions within one): pkg/scheduler/framework/plugins/nodeaffinity."""
    if not matches(template.node_selector, labels):
        return False
    if not template.affinity_terms:
        return True
    return any(all(_requirement(r, labels) for r in term) for term in template.affinity_terms)


def _domain_counts(
    constraint: SpreadConstraint, template: PodTemplate, nodes: Sequence[Node]
) -> dict[str, int]:
    """Matching pods per topology domain over the nodes that pass the pod's node affinity
    (nodeAffinityPolicy: Honor) whatever their taints (nodeTaintsPolicy: Ignore); pods being
    deleted are not counted (podtopologyspread/filtering.go calPreFilterState)."""
    counts: dict[str, int] = {}
    for node in nodes:
        domain = node.labels.get(constraint.topology_key)
        if domain is None or not node_matches(template, node.labels):
            continue
        n = sum(
            1
            for p in node.pods
            if p.phase < Phase.TERMINATING and matches(constraint.selector, p.template.labels)
        )
        counts[domain] = counts.get(domain, 0) + n
    return counts


@dataclass(frozen=True, slots=True)
class Decision:
    node: Node | None  # bind here
    nominated: Node | None = None  # or preempt `victims` here, then wait for them to go
    victims: tuple[Pod, ...] = ()
    message: str = ""  # FailedScheduling message when not bound


class Scheduler:
    def __init__(self, extended_resource_toleration: bool = True) -> None:
        self._auto = extended_resource_toleration

    def _tolerations(self, template: PodTemplate) -> tuple[Toleration, ...]:
        extra = extended_tolerations(template.requests) if self._auto else ()
        return template.tolerations + extra

    def reasons(
        self,
        pod: Pod,
        node: Node,
        nodes: Sequence[Node],
        reserved: Mapping[str, int] | None = None,
        spread_counts: Sequence[dict[str, int]] | None = None,
    ) -> list[str]:
        """Why `pod` does not fit `node` ([] when it does)."""
        template = pod.template
        if node.cordoned:
            return [UNSCHEDULABLE]
        tolerations = self._tolerations(template)
        for taint in node.taints:
            if taint.effect in {"NoSchedule", "NoExecute"} and not tolerates(tolerations, taint):
                return [f"node(s) had untolerated taint {{{taint.key}: {taint.value}}}"]
        if not node_matches(template, node.labels):
            return [AFFINITY]
        free = node.free()
        if reserved:
            free = {k: v - reserved.get(k, 0) for k, v in free.items()}
        if free.get(PODS, 110) < 1:
            return [TOO_MANY_PODS]
        short = insufficient(template.requests, free)
        if short:
            return [f"Insufficient {name}" for name in short]
        hard = [c for c in template.spread if c.hard]
        for i, constraint in enumerate(hard):
            domain = node.labels.get(constraint.topology_key)
            if domain is None:
                return [SPREAD]
            counts = (
                spread_counts[i]
                if spread_counts is not None
                else _domain_counts(constraint, template, nodes)
            )
            low = min(counts.values(), default=0)
            if counts.get(domain, 0) + 1 - low > constraint.max_skew:
                return [SPREAD]
        return []

    @staticmethod
    def _score(
        pod: Pod, node: Node, soft: Sequence[tuple[SpreadConstraint, dict[str, int]]]
    ) -> tuple[float, ...]:
        """Lower is better: matching pods in the node's domains of the soft (ScheduleAnyway)
        constraints (podtopologyspread/scoring.go), then LeastAllocated on cpu and memory
        (noderesources/least_allocated.go); the caller breaks ties by name."""
        skew = 0.0
        for constraint, counts in soft:
            domain = node.labels.get(constraint.topology_key)
            if domain is not None:
                skew += counts.get(domain, 0)
        used = 0.0
        for name in (CPU, MEMORY):
            total = node.allocatable.get(name, 0)
            if total:
                used += (node.used.get(name, 0) + pod.template.requests.get(name, 0)) / total
        return (skew, used)

    def schedule(
        self, pod: Pod, nodes: Sequence[Node], reserved: Mapping[str, Amounts] | None = None
    ) -> Decision:
        """One scheduling cycle: filter, score, bind; or PostFilter (preemption)."""
        spread_counts = [
            _domain_counts(c, pod.template, nodes) for c in pod.template.spread if c.hard
        ]
        histogram: dict[str, int] = {}
        feasible: list[Node] = []
        resolvable = 0  # nodes whose failure removing pods could fix
        for node in nodes:
            why = self.reasons(pod, node, nodes, (reserved or {}).get(node.name), spread_counts)
            if why:
                for reason in why:
                    histogram[reason] = histogram.get(reason, 0) + 1
                if why[0].startswith(("Insufficient", TOO_MANY_PODS, SPREAD)):
                    resolvable += 1
            else:
                feasible.append(node)
        if feasible:
            soft = [
                (c, _domain_counts(c, pod.template, nodes))
                for c in pod.template.spread
                if not c.hard
            ]
            best = min(feasible, key=lambda n: (*self._score(pod, n, soft), _tie(pod.name, n.name)))
            return Decision(best)
        message = fit_error(len(nodes), histogram)
        if not pod.template.preempts:
            return Decision(
                None, message=message + " preemption: not eligible due to preemptionPolicy=Never."
            )
        nominated = pod.nominated
        if nominated is not None and any(
            p.phase is Phase.TERMINATING and p.template.priority < pod.template.priority
            for p in nominated.pods
        ):
            # Victims are still leaving the nominated node: wait for them rather than
            # preempting elsewhere (defaultpreemption PodEligibleToPreemptOthers).
            return Decision(None, nominated=nominated, message=message)
        chosen = self._preempt(pod, nodes)
        if chosen is None:
            # Nodes failing a filter preemption cannot fix are "not helpful"
            # (framework/preemption/preemption.go nodesWherePreemptionMightHelp).
            # Each reason ends with a period and FitError adds one: events really read
            # "... No preemption victims found for incoming pod.."
            histogram_pf: dict[str, int] = {}
            if len(nodes) - resolvable:
                histogram_pf["Preemption is not helpful for scheduling."] = len(nodes) - resolvable
            if resolvable:
                histogram_pf["No preemption victims found for incoming pod."] = resolvable
            return Decision(
                None, message=f"{message} preemption: {fit_error(len(nodes), histogram_pf)}"
            )
        return Decision(None, nominated=chosen[0], victims=chosen[1], message=message)

    def _preempt(self, pod: Pod, nodes: Sequence[Node]) -> tuple[Node, tuple[Pod, ...]] | None:
        """DefaultPreemption (pkg/scheduler/framework/plugins/defaultpreemption, framework/
        preemption/preemption.go): on each node where removing every lower-priority pod
        makes room, reprieve victims from the highest priority down while the pod still
        fits; pick the node whose worst victim has the lowest priority, then the fewest
        victims. Nodes failing for reasons preemption cannot fix (taints, affinity) are
        skipped."""
        best: tuple[tuple[int, int, str], Node, tuple[Pod, ...]] | None = None
        for node in nodes:
            if node.cordoned or any(
                p.phase is Phase.TERMINATING and p.template.priority < pod.template.priority
                for p in node.pods
            ):
                # Lower-priority pods are already leaving: wait for them, do not preempt more.
                continue
            candidates = sorted(
                (
                    p
                    for p in node.pods
                    if p.phase < Phase.TERMINATING and p.template.priority < pod.template.priority
                ),
                key=lambda p: (p.template.priority, -p.created_t),
            )
            if not candidates:
                continue
            freed = node.free()
            for victim in candidates:
                for k, v in victim.template.requests.items():
                    freed[k] = freed.get(k, 0) + v
                freed[PODS] = freed.get(PODS, 0) + 1
            if self._blocked_without_resources(pod, node, freed):
                continue
            victims = list(candidates)
            for victim in sorted(candidates, key=lambda p: -p.template.priority):
                trial = dict(freed)
                for k, v in victim.template.requests.items():
                    trial[k] = trial.get(k, 0) - v
                trial[PODS] = trial.get(PODS, 0) - 1
                if not insufficient(pod.template.requests, trial):
                    freed = trial
                    victims.remove(victim)
            if not victims:
                # The pod fits without evicting anyone: resources were not what failed
                # (e.g. a spread constraint), and removing these pods would not help.
                continue
            key = (max(v.template.priority for v in victims), len(victims), node.name)
            if best is None or key < best[0]:
                best = (key, node, tuple(victims))
        return None if best is None else (best[1], best[2])

    def _blocked_without_resources(self, pod: Pod, node: Node, freed: Amounts) -> bool:
        template = pod.template
        tolerations = self._tolerations(template)
        for taint in node.taints:
            if taint.effect in {"NoSchedule", "NoExecute"} and not tolerates(tolerations, taint):
                return True
        if not node_matches(template, node.labels):
            return True
        return bool(insufficient(template.requests, freed))


def _tie(pod: str, node: str) -> int:
    """Equal scores: upstream picks one at random (schedule_one.go selectHost); a hash of
    the pair keeps that spread and the run deterministic."""
    return zlib.crc32(f"{pod}/{node}".encode())


def fit_error(total: int, histogram: Mapping[str, int]) -> str:
    reasons = sorted(f"{count} {reason}" for reason, count in histogram.items())
    message = f"0/{total} nodes are available"
    return message + (f": {', '.join(reasons)}." if reasons else ".")


def gpu_request(template: PodTemplate) -> int:
    return sum(v for k, v in template.requests.items() if is_gpu(k))
