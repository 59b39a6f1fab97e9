"""The controller around a model server: one that recreates its pods, and that replaces
them without taking the service down (kubernetes docs "Pods" → "Working with Pods": pods
are not rescheduled on their own, workload resources recreate them; "Deployments" →
"Strategy": Recreate kills all existing pods before new ones are created)."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.signals import services_for
from podserve.kube.types import Severity


def _bare(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if pod.kind != "Pod":
            continue
        owners = (pod.manifest.get("metadata") or {}).get("ownerReferences") or []
        if owners or pod.pod.get("restartPolicy", "Always") != "Always":
            continue
        yield Hit(pod.document, "kind", "a long-running Pod without a controller")


BARE_POD = Rule(
    id="bare-pod",
    severity=Severity.WARNING,
    title="Model server as a bare Pod",
    why="Nothing recreates a bare Pod: a node drain, spot reclaim, eviction under memory "
    "pressure or node failure deletes it for good, and the service stays down until "
    "someone notices. It also gets no rolling update, no PodDisruptionBudget coverage by a "
    "controller and no autoscaling.",
    fix="Run the server as a Deployment (or a StatefulSet for sharded models) with the same "
    "pod template.",
    check=_bare,
)


def _recreate(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if pod.kind != "Deployment" or not services_for(ctx, pod):
            continue
        strategy = (pod.manifest.get("spec") or {}).get("strategy") or {}
        if strategy.get("type") == "Recreate":
            yield Hit(
                pod.document,
                "spec.strategy.type",
                "every rollout stops all replicas before starting new ones: an outage as "
                "long as the model's load time",
            )


RECREATE_ON_SERVING = Rule(
    id="recreate-on-serving",
    severity=Severity.WARNING,
    title="Recreate strategy on a serving Deployment",
    why="`strategy: Recreate` deletes every old pod before the first new one starts; for a "
    "model server the service is down for the whole image pull, weight fetch and load on "
    "every rollout, config change or image bump. RollingUpdate with maxSurge 0 and "
    "maxUnavailable 1 replaces pods one at a time without needing a spare GPU.",
    fix="Use RollingUpdate: maxSurge 1 / maxUnavailable 0 when a spare GPU exists, else "
    "maxSurge 0 / maxUnavailable 1.",
    check=_recreate,
)
