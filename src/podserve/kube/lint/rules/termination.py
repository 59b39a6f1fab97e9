"""Termination: a preStop sleep so endpoint removal propagates, then a grace period long
enough for the longest request (kubernetes-semantics.md §3)."""

from __future__ import annotations

import re
from collections.abc import Iterator

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import Container
from podserve.kube.types import Severity


def pre_stop_seconds(ctr: Container) -> int | None:
    """Seconds the preStop hook waits: the native sleep action or an `exec: sleep N`."""
    hook = ((ctr.spec.get("lifecycle") or {}).get("preStop")) or {}
    sleep = hook.get("sleep")
    if isinstance(sleep, dict) and isinstance(sleep.get("seconds"), int):
        return int(sleep["seconds"])
    command = " ".join(str(p) for p in (hook.get("exec") or {}).get("command") or [])
    match = re.search(r"\bsleep\s+(\d+)", command)
    if match:
        return int(match[1])
    return 0 if hook else None


def _no_pre_stop(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.served or pod.runtime_managed or pod.kind == "Pod":
            continue
        for ctr in pod.containers():
            if ctr.spec.get("ports") and not pre_stop_seconds(ctr):
                yield Hit(
                    pod.document,
                    f"{ctr.path}.lifecycle.preStop",
                    f"container {ctr.name} gets SIGTERM while load balancers still "
                    "send it requests",
                )


NO_PRESTOP = Rule(
    id="no-prestop-delay",
    severity=Severity.WARNING,
    title="No preStop delay before SIGTERM",
    why="Endpoint removal and SIGTERM start together; kube-proxy, ingress controllers and "
    "gateways learn of the removal seconds later. A server that stops accepting at SIGTERM "
    "refuses the requests still routed to it, on every rollout and scale-down.",
    fix="Add `lifecycle.preStop.sleep.seconds: 10` (Kubernetes ≥ 1.30) or "
    '`preStop.exec.command: [sleep, "10"]` on older clusters, and count it in '
    "terminationGracePeriodSeconds.",
    check=_no_pre_stop,
)


def _grace(ctx: LintContext) -> Iterator[Hit]:
    for pod in ctx.pods:
        if not pod.served or pod.runtime_managed:
            continue
        longest = pod.annotation_number(c.LONGEST_REQUEST_SECONDS)
        for ctr in pod.containers():
            pre_stop = pre_stop_seconds(ctr) or 0
            needed = pre_stop + (longest or 0)
            if longest is None and not pre_stop:
                continue
            if pod.grace_period_s < needed or (longest is None and pod.grace_period_s <= pre_stop):
                detail = (
                    f"preStop {pre_stop}s + longest request {longest:g}s"
                    if longest is not None
                    else f"preStop {pre_stop}s leaves no time to drain"
                )
                yield Hit(
                    pod.document,
                    f"{pod.pod_path}.terminationGracePeriodSeconds",
                    f"grace period {pod.grace_period_s}s is shorter than {detail}",
                )


GRACE_SHORT = Rule(
    id="grace-period-short",
    severity=Severity.ERROR,
    title="Grace period shorter than preStop + the longest request",
    why="The grace clock starts before preStop runs. When preStop plus the drain of the "
    "longest in-flight request exceeds terminationGracePeriodSeconds (default 30 s), the "
    "kubelet SIGKILLs the server with requests — often long generations — still running.",
    fix="Set terminationGracePeriodSeconds = preStop + longest request + a margin, and the "
    "server's drain timeout (PODSERVE_DRAIN_TIMEOUT_S) to the longest request; declare it "
    f"with the {c.LONGEST_REQUEST_SECONDS} annotation.",
    check=_grace,
)
