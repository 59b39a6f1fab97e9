"""Spot/preemptible capacity: the grace period must fit inside the reclaim notice."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube.capacity import SPOT_POOLS, spot_notice_for_label
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import PodView
from podserve.kube.types import Severity


def spot_notice(pod: PodView) -> int | None:
    """The shortest reclaim notice of the spot pools this pod may run on, if any."""
    notices = [
        notice
        for key, op, values, _ in pod.node_terms()
        if op == "In"
        for value in values
        if (notice := spot_notice_for_label(key, value)) is not None
    ]
    for toleration in pod.tolerations():
        for pool in SPOT_POOLS.values():
            if pool.taint_key and toleration.get("key") == pool.taint_key:
                notices.append(pool.reclaim_notice_s)
    return min(notices) if notices else None


def _spot_grace(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        notice = spot_notice(pod)
        if notice is not None and pod.grace_period_s > notice:
            yield Hit(
                pod.document,
                f"{pod.pod_path}.terminationGracePeriodSeconds",
                f"grace period {pod.grace_period_s}s on spot capacity with a {notice}s "
                "reclaim notice",
            )


SPOT_GRACE = Rule(
    id="spot-grace-exceeds-notice",
    severity=Severity.WARNING,
    title="Grace period longer than the spot reclaim notice",
    why="When the provider reclaims a spot node it powers it off after its notice (GKE gives "
    "ordinary pods 15 s of its 30 s, Azure 30 s, AWS 2 min) whatever the pod's "
    "terminationGracePeriodSeconds says; "
    "requests still draining are cut and a batch item in progress is lost.",
    fix="Keep serving on on-demand nodes, or bound preStop + the longest request below the "
    "notice; let batch Jobs tolerate spot and ignore DisruptionTarget in podFailurePolicy.",
    check=_spot_grace,
)
