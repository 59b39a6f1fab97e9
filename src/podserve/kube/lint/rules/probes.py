"""Probes: three questions (started? alive? ready?) asked of three endpoints, with a startup
budget that covers the model load (kubernetes-semantics.md §3)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from podserve.kube import conventions as c
from podserve.kube.lint.context import LintContext
from podserve.kube.lint.model import Hit, Rule
from podserve.kube.lint.pods import Container, PodView
from podserve.kube.types import Severity

LIVENESS_DELAY_LIMIT_S = 60


def probe_budget_s(probe: Mapping[str, Any]) -> int:
    """How long a probe tolerates failure before acting (API defaults: period 10, threshold 3)."""
    return int(probe.get("initialDelaySeconds", 0)) + int(probe.get("failureThreshold", 3)) * int(
        probe.get("periodSeconds", 10)
    )


def _probed(ctx: LintContext) -> Iterator[tuple[PodView, Container]]:
    """Long-running containers whose probes the manifest itself declares."""
    for pod in ctx.pods:
        if pod.served and not pod.runtime_managed:
            for ctr in pod.containers():
                yield pod, ctr


def _liveness_without_startup(ctx: LintContext) -> Iterator[Hit]:
    for pod, ctr in _probed(ctx):
        if pod.model_pod and ctr.probe("livenessProbe") and not ctr.probe("startupProbe"):
            yield Hit(
                pod.document,
                f"{ctr.path}.startupProbe",
                f"container {ctr.name} has a liveness probe but no startup probe",
            )


LIVENESS_WITHOUT_STARTUP = Rule(
    id="liveness-without-startup-probe",
    severity=Severity.ERROR,
    title="Liveness probe without a startup probe on a model pod",
    why="A model takes minutes to load, and liveness starts counting at once: the kubelet "
    "kills the container mid-load, it restarts, loads again, is killed again — "
    "CrashLoopBackOff that never serves. A startup probe holds liveness and readiness off "
    "until the load is done.",
    fix="Add a startupProbe (podserve: GET /startup) with failureThreshold x periodSeconds ≥ "
    "1.5 x the observed load time; keep liveness short.",
    check=_liveness_without_startup,
)


def _startup_budget(ctx: LintContext) -> Iterator[Hit]:
    for pod, ctr in _probed(ctx):
        load = pod.annotation_number(c.LOAD_SECONDS)
        probe = ctr.probe("startupProbe")
        if load is None or probe is None:
            continue
        budget = probe_budget_s(probe)
        if budget < load * 1.5:
            yield Hit(
                pod.document,
                f"{ctr.path}.startupProbe.failureThreshold",
                f"startup budget {budget}s is below 1.5 x the declared load time "
                f"({load:g}s, annotation {c.LOAD_SECONDS})",
            )


STARTUP_BUDGET_SHORT = Rule(
    id="startup-budget-short",
    severity=Severity.ERROR,
    title="Startup probe budget shorter than 1.5 x the load time",
    why="Load time varies with the node (cold page cache, a busy disk or network, another "
    "pod fetching the same weights). A startup budget at the typical load time kills the "
    "slow starts, which then start again from scratch, slower still.",
    fix="Raise startupProbe.failureThreshold so that failureThreshold x periodSeconds ≥ 1.5 x "
    "the observed load time (podserve logs and exports the measured load time).",
    check=_startup_budget,
)


def _path(probe: Mapping[str, Any] | None) -> tuple[object, object] | None:
    if probe is None:
        return None
    get = probe.get("httpGet")
    if isinstance(get, Mapping):
        return (get.get("path", "/"), get.get("port"))
    for kind in ("exec", "tcpSocket", "grpc"):
        if kind in probe:
            return (kind, repr(probe[kind]))
    return None


def _same_path(ctx: LintContext) -> Iterator[Hit]:
    for pod, ctr in _probed(ctx):
        live, ready = _path(ctr.probe("livenessProbe")), _path(ctr.probe("readinessProbe"))
        if live is not None and live == ready:
            yield Hit(
                pod.document,
                f"{ctr.path}.livenessProbe",
                f"liveness and readiness both ask {live[0]}",
            )


LIVENESS_READINESS_SAME = Rule(
    id="liveness-readiness-same-path",
    severity=Severity.ERROR,
    title="Liveness and readiness probe the same endpoint",
    why="Readiness should fail under overload (stop sending me traffic); liveness should fail "
    "only when the process is wedged (restart me). One endpoint for both turns every load "
    "spike into restarts, which drop the queued requests and move the load to the "
    "remaining pods, which then restart too.",
    fix="Probe liveness on a cheap process-health endpoint (podserve: /healthz) and readiness "
    "on a serving-health endpoint (podserve: /ready).",
    check=_same_path,
)


def _no_readiness(ctx: LintContext) -> Iterator[Hit]:
    for pod, ctr in _probed(ctx):
        if ctr.spec.get("ports") and not ctr.probe("readinessProbe"):
            yield Hit(
                pod.document,
                f"{ctr.path}.readinessProbe",
                f"container {ctr.name} serves ports but has no readiness probe",
            )


NO_READINESS = Rule(
    id="no-readiness-probe",
    severity=Severity.ERROR,
    title="Serving container without a readiness probe",
    why="Without readiness a pod receives traffic the moment its process starts — before "
    "the model is loaded — and keeps receiving it while overloaded or draining; clients see "
    "errors on every rollout and scale-up.",
    fix="Add a readinessProbe on an endpoint that is 200 only when the model is loaded and "
    "the server is not overloaded or draining (podserve: GET /ready, period 5 s).",
    check=_no_readiness,
)


def _liveness_delay(ctx: LintContext) -> Iterator[Hit]:
    for pod, ctr in _probed(ctx):
        probe = ctr.probe("livenessProbe")
        if probe is not None and int(probe.get("initialDelaySeconds", 0)) >= LIVENESS_DELAY_LIMIT_S:
            yield Hit(
                pod.document,
                f"{ctr.path}.livenessProbe.initialDelaySeconds",
                f"liveness waits {probe['initialDelaySeconds']}s before its first check "
                "to cover the model load",
            )


LIVENESS_INITIAL_DELAY = Rule(
    id="liveness-initial-delay",
    severity=Severity.WARNING,
    title="Liveness covers the model load with a long initialDelaySeconds",
    why="A fixed delay is a guess: too short and slow loads are killed, too long and a "
    "process that wedges early is not restarted for minutes — and the delay applies to every "
    "restart. A startup probe ends as soon as the load does.",
    fix=f"Drop initialDelaySeconds below {LIVENESS_DELAY_LIMIT_S}s and add a startupProbe "
    "sized from the observed load time.",
    check=_liveness_delay,
)
