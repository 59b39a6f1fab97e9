"""Rolling updates of GPU Deployments: a surge pod needs a spare device."""

from __future__ import annotations

from collections.abc import Iterator

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import int_or_percent
from podserve.kube.types import Severity


def _surge(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if pod.kind != "Deployment" or not pod.gpu:
            continue
        if pod.annotations.get(c.SPARE_GPU) == "true":
            continue
        strategy = (pod.manifest.get("spec") or {}).get("strategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            continue
        rolling = strategy.get("rollingUpdate") or {}
        replicas = max(1, ctx.min_replicas(pod))
        # Defaults 25%/25%; surge rounds up, unavailable down; both 0 means 1 unavailable (§2).
        surge = int_or_percent(rolling.get("maxSurge", "25%"), replicas, round_up=True)
        unavailable = int_or_percent(rolling.get("maxUnavailable", "25%"), replicas, round_up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        if surge > 0 and unavailable == 0:
            shown = "the default strategy" if not rolling else "strategy.rollingUpdate"
            yield Hit(
                pod.document,
                "spec.strategy.rollingUpdate",
                f"{shown} resolves to maxSurge {surge}, maxUnavailable 0 at {replicas} "
                f"replicas: each rollout step needs {surge} spare GPU node slot(s)",
            )


SURGE_NEEDS_SPARE_GPU = Rule(
    id="surge-needs-spare-gpu",
    severity=Severity.WARNING,
    title="Rolling update surges on a GPU Deployment",
    why="With maxUnavailable 0 a rollout starts a new pod before stopping an old one. On a "
    "GPU pool with no free device the surge pod stays Pending, the rollout never progresses "
    "(ProgressDeadlineExceeded, no rollback), and — because a new pod needs the spare for "
    "its whole model load — even a free device is held for minutes per step.",
    fix="Use maxSurge: 0, maxUnavailable: 1 (one replica down at a time), or keep spare GPU "
    f'capacity (e.g. podserve headroom pods) and mark the Deployment {c.SPARE_GPU}: "true".',
    check=_surge,
)
