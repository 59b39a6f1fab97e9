"""Pods that start and die: liveness kills during the model load, and host-memory OOM."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from podserve.kube import conventions as c
from podserve.kube.doctor.model import Diagnosis, PodDump
from podserve.kube.plan import STARTUP_BUDGET_FACTOR, STARTUP_PERIOD_S

# "model llama loaded in 183.2s", "Loading took 183 seconds", JSON `"load_duration_s":183.2`
_LOAD_TIME = re.compile(
    r"(?:(?:loaded in|loading took)\s*([0-9]+(?:\.[0-9]+)?)\s*s)"
    r"|(?:load_duration_s\"?\s*[=:]\s*([0-9]+(?:\.[0-9]+)?))",
    re.I,
)
_LOADING = ("loading", "load model", "downloading", "fetching", "loading checkpoint")


def observed_load_seconds(dump: PodDump) -> float | None:
    for line in dump.logs:
        match = _LOAD_TIME.search(line)
        if match:
            return float(match[1] or match[2])
    try:
        return float(dump.annotations()[c.LOAD_SECONDS])
    except (KeyError, ValueError):
        return None


def _probe_budget(probe: Mapping[str, Any]) -> int:
    return int(probe.get("initialDelaySeconds", 0)) + int(probe.get("failureThreshold", 3)) * int(
        probe.get("periodSeconds", 10)
    )


def _restarting(dump: PodDump) -> list[str]:
    lines = []
    for status in dump.container_statuses():
        waiting = (status.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "CrashLoopBackOff" or status.get("restartCount", 0) > 0:
            lines.append(
                f"container {status.get('name')}: restartCount "
                f"{status.get('restartCount', 0)}, "
                f"{waiting.get('reason', 'running')}"
            )
    return lines


def liveness_during_load(dump: PodDump) -> Diagnosis | None:
    killed = dump.events_where("Unhealthy", "Killing", contains="liveness") + dump.events_where(
        "Unhealthy", "Killing", contains="startup probe"
    )
    restarts = _restarting(dump)
    if not killed or not restarts:
        return None
    loading = dump.log_lines(*_LOADING)
    main = ((dump.pod.get("spec") or {}).get("containers") or [{}])[0]
    startup = main.get("startupProbe")
    observed = observed_load_seconds(dump)
    threshold = math.ceil(observed * STARTUP_BUDGET_FACTOR / STARTUP_PERIOD_S) if observed else None
    if startup is None:
        cause = (
            "There is no startup probe, so liveness runs during the model load and kills "
            "the container before it finishes; every restart loads from scratch."
        )
    else:
        cause = (
            f"The startup probe allows {_probe_budget(startup)}s, less than the load "
            "takes; the kubelet kills the container mid-load."
        )
    sized = (
        f"periodSeconds: {STARTUP_PERIOD_S}, failureThreshold: {threshold} "
        f"(1.5 x the observed {observed:g}s load)"
        if threshold and observed is not None
        else "failureThreshold x periodSeconds ≥ 1.5 x the observed load time (podserve "
        "logs it as `loaded in …s`)"
    )
    return Diagnosis(
        id="liveness-during-load",
        title="CrashLoopBackOff: the liveness/startup probe kills the pod while the model loads",
        explanation=cause,
        evidence=tuple(
            restarts + [e.line() for e in killed] + [f"log: {line}" for line in loading[-3:]]
        ),
        fix=(
            f"Add or lengthen the startupProbe on {c.STARTUP_PATH}: {sized}.",
            f"Keep liveness on {c.LIVENESS_PATH} short (period 20, failureThreshold 3); never "
            "cover the load with liveness initialDelaySeconds.",
            "podserve render computes this from model.loadSeconds.",
        ),
    )


def oom_killed(dump: PodDump) -> Diagnosis | None:
    hits = []
    for status in dump.container_statuses():
        for state_key in ("lastState", "state"):
            terminated = (status.get(state_key) or {}).get("terminated") or {}
            if terminated.get("reason") == "OOMKilled":
                hits.append(
                    f"container {status.get('name')} {state_key}: OOMKilled, exit "
                    f"code {terminated.get('exitCode')}, finished "
                    f"{terminated.get('finishedAt')}"
                )
    if not hits:
        return None
    loading = dump.log_lines(*_LOADING)
    ready_ever = bool(dump.log_lines("ready", "startup complete", "loaded in"))
    during_load = bool(loading) and not ready_ever
    limits = []
    for container in (dump.pod.get("spec") or {}).get("containers") or []:
        memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        limits.append(f"container {container.get('name')} memory limit: {memory or 'none'}")
    if during_load:
        explanation = (
            "The container exceeded its memory limit while loading the model: "
            "reading weights can need about their size again in host memory "
            "(a copy on the way to the GPU), on top of /dev/shm usage, which counts "
            "against the same limit."
        )
    else:
        explanation = (
            "The container exceeded its memory limit (host memory, not GPU "
            "memory); /dev/shm usage counts against the same limit."
        )
    return Diagnosis(
        id="oom-killed",
        title="OOMKilled" + (" during model load" if during_load else ""),
        explanation=explanation,
        evidence=tuple(hits + limits + [f"log: {line}" for line in loading[-3:]]),
        fix=(
            "Raise the memory request and limit (equal) to at least ~2 x the weights' size "
            "plus the /dev/shm sizeLimit, or load memory-mapped safetensors so no second "
            "copy is made.",
            "Check node allocatable memory can hold it: "
            "`kubectl describe node | grep -A5 Allocatable`.",
        ),
    )
