"""The summary a simulation produces (`summary.json`, docs/simulate.md documents each field),
the findings drawn from it, and the `--format text` rendering."""

from __future__ import annotations

from typing import Any

import numpy as np

from podserve.kube.simulate.engine import Result
from podserve.kube.simulate.scaling import ScaleEvent
from podserve.kube.types import Severity

MAX_LATE_FINDINGS = 3
REJECTED_WARN_RATIO = 0.01
LATE_AFTER_S = 60


def weighted_p99(latency: np.ndarray, weights: np.ndarray) -> float:
    mask = weights > 0
    if not mask.any():
        return 0.0
    values, w = latency[mask], weights[mask]
    order = np.argsort(values)
    cum = np.cumsum(w[order])
    index = int(np.searchsorted(cum, 0.99 * cum[-1]))
    return float(values[order][min(index, len(order) - 1)])


def _finding(fid: str, severity: Severity, message: str) -> dict[str, str]:
    return {"id": fid, "severity": severity.value, "message": message}


def _ready_at(result: Result, event: ScaleEvent) -> int | None:
    ready = result.timeline["replicas_ready"]
    start = int(event.t)
    hits = np.nonzero(ready[start:] >= event.after)[0]
    return None if hits.size == 0 else start + int(hits[0])


def _mean(values: np.ndarray, start: int, width: int) -> float:
    window = values[max(0, start) : start + width]
    return float(window.mean()) if window.size else 0.0


def findings(result: Result) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    offered = result.timeline["offered"]
    for pod, reason in result.unschedulable:
        out.append(_finding("unschedulable", Severity.ERROR, f"{pod} stays Pending: {reason}"))
    for name, rollout in result.rollouts.items():
        if rollout.completed_t is None:
            why = rollout.stalled_reason or "not complete when the simulation ended"
            out.append(
                _finding(
                    "rollout-stalled", Severity.ERROR, f"rollout of {name} did not complete: {why}"
                )
            )
    if result.restarts:
        out.append(
            _finding(
                "startup-probe-restarts",
                Severity.ERROR,
                f"{result.restarts} container restart(s): the model load outlasts the startup "
                "probe budget (initialDelaySeconds + failureThreshold x periodSeconds), so the "
                "kubelet kills the server before it is ready; raise failureThreshold",
            )
        )
    wakeups = [e for e in result.scale_events if e.before == 0 and e.after > 0]
    if result.rejected_at_zero and wakeups:
        delays = [r - e.t for e in wakeups if (r := _ready_at(result, e)) is not None]
        took = f"; a wake-up took {max(delays):.0f} s (image pull + fetch + load)" if delays else ""
        out.append(
            _finding(
                "wake-up-loses-requests",
                Severity.WARNING,
                f"{result.rejected_at_zero} request(s) rejected while no replica was ready "
                f"({len(wakeups)} scale-up(s) from zero{took}); keep minReplicas >= 1 at busy "
                "hours, or hold requests at the gateway during a cold start",
            )
        )
    late = 0
    for event in result.scale_events:
        if event.after <= event.before or event.before == 0:
            continue
        ready_t = _ready_at(result, event)
        before = _mean(offered, int(event.t) - LATE_AFTER_S, LATE_AFTER_S)
        if ready_t is None:
            continue
        after = _mean(offered, ready_t, LATE_AFTER_S)
        if ready_t - event.t > LATE_AFTER_S and after < 0.5 * before:
            late += 1
            if late <= MAX_LATE_FINDINGS:
                out.append(
                    _finding(
                        "scale-up-after-spike",
                        Severity.WARNING,
                        f"{event.workload}: scale-up {event.before}→{event.after} at "
                        f"t={event.t:.0f}s was ready at t={ready_t}s ({ready_t - event.t:.0f} s "
                        f"later), when the load had fallen from {before:.1f} to {after:.1f} "
                        "req/s: pods that load this slowly pay for spikes they miss",
                    )
                )
    reclaim_cut = result.cut_by_cause.get("reclaim", 0)
    if reclaim_cut:
        out.append(
            _finding(
                "spot-reclaim-cuts-requests",
                Severity.WARNING,
                f"{reclaim_cut} in-flight request(s) cut by spot reclaims: the node's shutdown "
                "share of the notice is shorter than the drain needs",
            )
        )
    other_cut = result.cut - reclaim_cut
    if other_cut:
        causes = ", ".join(
            f"{k}: {v}" for k, v in sorted(result.cut_by_cause.items()) if k != "reclaim"
        )
        out.append(
            _finding(
                "requests-cut",
                Severity.WARNING,
                f"{other_cut} in-flight request(s) cut at SIGKILL ({causes})",
            )
        )
    if result.evictions_refused:
        first_t, pod, pdb = result.evictions_refused[0]
        out.append(
            _finding(
                "pdb-blocks-eviction",
                Severity.WARNING,
                f"{len(result.evictions_refused)} eviction(s) refused with 429 (first: {pod} at "
                f"t={first_t:.0f}s, PodDisruptionBudget {pdb}): a drain or scale-down waits "
                "until enough replicas are Ready",
            )
        )
    for name, grace, notice in result.spot_grace:
        if grace > notice:
            out.append(
                _finding(
                    "grace-exceeds-reclaim-notice",
                    Severity.WARNING,
                    f"{name}: terminationGracePeriodSeconds {grace:g} is longer than the "
                    f"{notice:g} s a spot node gives ordinary pods; a reclaim cuts the rest",
                )
            )
    if result.offered and result.rejected / result.offered > REJECTED_WARN_RATIO:
        out.append(
            _finding(
                "requests-rejected",
                Severity.WARNING,
                f"{result.rejected} of {result.offered} requests rejected with 503 "
                f"({result.rejected / result.offered:.1%})",
            )
        )
    for name, params in sorted(result.capacity.items()):
        if params.source != "bench":
            out.append(
                _finding(
                    "capacity-assumed",
                    Severity.INFO,
                    f"{name}: per-pod capacity from the {params.source} (concurrency "
                    f"{params.concurrency}, {params.service_s:g} s per request), not measured; "
                    "pass --bench with a `podserve bench` result",
                )
            )
    return out


def _rollout(result: Result) -> dict[str, Any] | None:
    if not any(e.kind == "rollout" for e in result.events):
        return None
    records = result.rollouts
    completed = bool(records) and all(r.completed_t is not None for r in records.values())
    seconds = (
        max((r.completed_t or 0.0) - r.started_t for r in records.values()) if completed else None
    )
    stalled = next((r.stalled_reason for r in records.values() if r.stalled_reason), None)
    if not completed and stalled is None and records:
        stalled = "not complete when the simulation ended"
    return {
        "completed": completed,
        "seconds": seconds,
        "max_unavailable_seen": max((r.max_unavailable_seen for r in records.values()), default=0),
        "stalled_reason": stalled,
        "workloads": {
            name: {
                "started_t": r.started_t,
                "completed_t": r.completed_t,
                "max_unavailable_seen": r.max_unavailable_seen,
                "stalled_reason": r.stalled_reason,
            }
            for name, r in sorted(records.items())
        },
    }


def build_summary(result: Result, seed: int, not_simulated: tuple[str, ...] = ()) -> dict[str, Any]:
    timeline = result.timeline
    return {
        "scheduled": not result.unschedulable,
        "unschedulable": [{"pod": p, "reason": r} for p, r in result.unschedulable],
        "rollout": _rollout(result),
        "requests": {
            "offered": result.offered,
            "served": result.served,
            "rejected": result.rejected,
            "cut": result.cut,
        },
        "latency_p99_s": round(weighted_p99(timeline["latency_p99_s"], timeline["served"]), 4),
        "gpu_hours": round(result.gpu_hours, 4),
        "cost_usd": round(result.cost_usd, 4),
        "scale_events": [
            {"t": e.t, "from": e.before, "to": e.after, "reason": e.reason, "workload": e.workload}
            for e in result.scale_events
        ],
        "findings": findings(result),
        "duration_s": result.duration_s,
        "seed": seed,
        "capacity": {
            name: {
                "concurrency": p.concurrency,
                "max_queue": p.max_queue,
                "service_s": p.service_s,
                "service_p99_s": p.service_p99_s,
                "source": p.source,
            }
            for name, p in sorted(result.capacity.items())
        },
        "cut_by_cause": dict(sorted(result.cut_by_cause.items())),
        "container_restarts": result.restarts,
        "evictions": {"allowed": result.evictions, "refused": len(result.evictions_refused)},
        "not_simulated": list(not_simulated),
    }


def text_summary(summary: dict[str, Any]) -> str:
    req = summary["requests"]
    offered = req["offered"] or 1
    lines = [
        f"simulated {summary['duration_s']} s (seed {summary['seed']})",
        f"scheduled: {'yes' if summary['scheduled'] else 'NO'}",
    ]
    for item in summary["unschedulable"]:
        lines.append(f"  {item['pod']}: {item['reason']}")
    rollout = summary["rollout"]
    if rollout is not None:
        state = (
            f"completed in {rollout['seconds']:.0f} s"
            if rollout["completed"]
            else f"NOT completed ({rollout['stalled_reason']})"
        )
        lines.append(
            f"rollout: {state}; at most {rollout['max_unavailable_seen']} replica(s) unavailable"
        )
    lines += [
        f"requests: {req['offered']:,} offered, {req['served']:,} served "
        f"({req['served'] / offered:.2%}), {req['rejected']:,} rejected (503), "
        f"{req['cut']:,} cut",
        f"latency p99: {summary['latency_p99_s']:.3f} s",
        f"GPU-hours: {summary['gpu_hours']:.2f}   cost: ${summary['cost_usd']:.2f}",
        f"scale events: {len(summary['scale_events'])}",
    ]
    for event in summary["scale_events"][:10]:
        lines.append(
            f"  t={event['t']:>7.0f}s {event['workload']} {event['from']}→{event['to']}"
            f"  {event['reason']}"
        )
    if len(summary["scale_events"]) > 10:
        lines.append(f"  … {len(summary['scale_events']) - 10} more in summary.json")
    lines.append("findings:" if summary["findings"] else "findings: none")
    for item in summary["findings"]:
        lines.append(f"  [{item['severity']}] {item['id']}: {item['message']}")
    return "\n".join(lines) + "\n"
