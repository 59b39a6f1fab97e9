"""Invariants over random clusters, workloads, traffic and events (Hypothesis): replicas stay
within the autoscaler's bounds, no node ever binds more than it has, and every request is
counted exactly once as served, rejected or cut."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podserve.kube.simulate import Options, Simulation, parse_event, scenario_from_manifests
from podserve.kube.simulate.resources import PODS, gpu_count
from podserve.kube.simulate.traffic import Trace

from .builders import SERVE, deployment, gpu_cluster, headroom, pdb

# maxSurge / maxUnavailable: a count or a percentage, as Kubernetes takes them
SURGES: list[int | str] = [0, 1, "25%"]


def _hpa(low: int, high: int) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "serve"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "serve"},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": "podserve_inflight_requests"},
                        "target": {"type": "AverageValue", "averageValue": "2"},
                    },
                }
            ],
        },
    }


def _keda(low: int, high: int) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "serve"},
        "spec": {
            "scaleTargetRef": {"name": "serve"},
            "pollingInterval": 15,
            "cooldownPeriod": 60,
            "minReplicaCount": low,
            "maxReplicaCount": high,
            "fallback": {"failureThreshold": 2, "replicas": high},
            "triggers": [
                {
                    "type": "prometheus",
                    "metadata": {"query": "sum(podserve_queue_depth)", "threshold": "2"},
                }
            ],
        },
    }


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Simulation, int, int, int]:
    nodes = draw(st.integers(1, 4))
    gpus = draw(st.integers(1, 2))
    low = draw(st.integers(0, 2))
    high = draw(st.integers(max(1, low), 5))
    engine = draw(st.sampled_from(["hpa", "keda"]))
    if engine == "hpa":
        low = max(1, low)
        high = max(high, low)
    replicas = draw(st.integers(max(1, low), high))
    docs = [
        deployment(
            "serve",
            replicas,
            SERVE,
            surge=draw(st.sampled_from(SURGES)),
            unavailable=draw(st.sampled_from(SURGES)),
            strategy=draw(st.sampled_from(["RollingUpdate", "Recreate"])),
            load_s=draw(st.sampled_from([5, 30, 400])),
            grace_s=20,
        ),
        pdb("serve", SERVE, minAvailable=1),
        _hpa(low, high) if engine == "hpa" else _keda(low, high),
    ]
    if draw(st.booleans()):
        docs += headroom(draw(st.integers(1, 2)))
    autoscale = draw(st.booleans())
    extra: dict[str, Any] = {
        "spot": True,
        "reclaimNoticeSeconds": 30,
        "podShutdownSeconds": 15,
        "provisioningSeconds": 60,
    }
    if autoscale:
        extra.update({"min": 0, "max": nodes + 2})
    cluster = gpu_cluster(nodes, gpus, extra)
    duration = 900
    rates = draw(st.lists(st.floats(0, 60), min_size=1, max_size=5))
    step = duration // len(rates)
    trace = Trace(tuple((float(i * step), r) for i, r in enumerate(rates)))
    events = []
    for _ in range(draw(st.integers(0, 3))):
        t = draw(st.integers(1, duration - 1))
        kind = draw(st.sampled_from(["rollout", "spot-reclaim", "node-drain", "metrics-down"]))
        arg = {
            "rollout": "",
            "spot-reclaim": ":gpu",
            "node-drain": f":gpu-{draw(st.integers(0, 3))}",
            "metrics-down": ":90",
        }[kind]
        events.append(parse_event(f"{kind}@{t}{arg}"))
    options = Options(
        duration_s=duration,
        seed=draw(st.integers(0, 2**16)),
        events=tuple(sorted(events, key=lambda e: e.t)),
    )
    scenario = scenario_from_manifests(docs, None)
    capacity = (nodes + 2 if autoscale else nodes) * gpus
    return Simulation(scenario, cluster, trace, options), low, high, capacity


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(worlds())
def test_invariants(case: tuple[Simulation, int, int, int]) -> None:
    sim, low, high, capacity = case
    for t in range(sim.options.duration_s):
        sim.step(t)
        for node in sim.world.nodes:
            for name, used in node.used.items():
                assert used <= node.allocatable.get(name, 0), (t, node.name, name)
            bound = sum(gpu_count(p.template.requests) for p in node.pods)
            assert bound <= gpu_count(node.allocatable)
            assert node.used.get(PODS, 0) == len(node.pods)
        if t >= 15:
            assert low <= sim.controllers["serve"].replicas <= high
    result = sim.result()
    assert max(result.timeline["gpus_in_use"]) <= capacity
    assert result.offered == result.served + result.rejected + result.cut
    assert result.timeline["offered"].sum() == result.offered
    assert result.cut == sum(result.cut_by_cause.values())
