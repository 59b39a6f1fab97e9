"""Whole-simulation behaviours: drains against a budget with the cluster autoscaler, startup
probe restarts, spot reclaims cutting long requests, Recreate and StatefulSet rollouts, KEDA
fallback, determinism."""

from __future__ import annotations

from typing import Any

import yaml

from podserve.kube.simulate import (
    Options,
    Simulation,
    build_summary,
    constant,
    load_cluster,
    manifests_from_text,
    parse_event,
    scenario_from_manifests,
)
from podserve.kube.simulate.cluster import Cluster

from ..paths import REPO_ROOT
from .builders import GPU_TAINT, SERVE, deployment, gpu_cluster, pdb, simulation


def two_pools(b_max: int = 1) -> Cluster:
    def pool(name: str, count: int, **extra: Any) -> dict[str, Any]:
        return {
            "name": name,
            "count": count,
            "taints": [GPU_TAINT],
            "allocatable": {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": 2},
            "pricePerHourUsd": 2.0,
            "provisioningSeconds": 200,
            "imagePullSeconds": 30,
            **extra,
        }

    doc = {
        "apiVersion": "podserve.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "t"},
        "spec": {"nodePools": [pool("a", 1), pool("b", 0, min=0, max=b_max)]},
    }
    return load_cluster(yaml.safe_dump(doc))


def _ids(summary: dict[str, Any]) -> set[str]:
    return {f["id"] for f in summary["findings"]}


def test_drain_waits_for_the_budget_while_the_autoscaler_adds_a_node() -> None:
    docs = [deployment("serve", 2, SERVE, load_s=30), pdb("serve", SERVE, minAvailable=1)]
    sim = simulation(docs, two_pools(), 1500, rate=5, events=(parse_event("node-drain@200:a-0"),))
    result = sim.run()
    summary = build_summary(result, seed=0)
    # The first eviction goes through; the second is refused (429) until the replacement,
    # on a node the autoscaler adds, is Ready.
    assert result.evictions == 2
    assert len(result.evictions_refused) >= 2
    refused_at = [t for t, _, _ in result.evictions_refused]
    scale_up_t = next(
        t for t, kind, pod, node in sim.world.history if kind == "bind" and node.startswith("b-")
    )
    assert min(refused_at) == 200
    assert max(refused_at) >= scale_up_t
    assert not [p for p in sim.world.nodes[0].pods if p.owner == "serve"]
    assert "pdb-blocks-eviction" in _ids(summary)
    assert summary["requests"]["cut"] == 0
    assert sim.world.ready.get("serve") == 2


def test_a_load_longer_than_the_startup_budget_restarts_and_never_serves() -> None:
    docs = [deployment("serve", 1, SERVE, load_s=400, startup_failures=30)]
    result = simulation(docs, gpu_cluster(1), 1800, rate=1).run()
    assert result.restarts >= 2
    assert result.served == 0
    assert result.timeline["replicas_ready"].max() == 0
    assert "startup-probe-restarts" in _ids(build_summary(result, seed=0))


def test_spot_reclaim_shorter_than_the_drain_cuts_long_requests() -> None:
    docs = [deployment("serve", 2, SERVE, load_s=20, grace_s=120)]
    docs[0]["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "PODSERVE_MAX_CONTEXT_TOKENS", "value": "4096"}  # generative: long requests
    ]
    cluster = gpu_cluster(
        2, extra={"spot": True, "reclaimNoticeSeconds": 30, "podShutdownSeconds": 15}
    )
    result = simulation(
        docs, cluster, 900, rate=0.5, events=(parse_event("spot-reclaim@600:gpu"),)
    ).run()
    assert result.cut > 0
    assert result.cut_by_cause == {"reclaim": result.cut}
    assert result.offered == result.served + result.rejected + result.cut
    ids = _ids(build_summary(result, seed=0))
    assert {"spot-reclaim-cuts-requests", "grace-exceeds-reclaim-notice"} <= ids
    assert result.timeline["nodes"][-1] == 0  # reclaimed nodes are gone


def test_recreate_takes_every_replica_down_then_up() -> None:
    docs = [deployment("serve", 2, SERVE, strategy="Recreate", load_s=30)]
    result = simulation(
        docs, gpu_cluster(3), 1200, rate=1, events=(parse_event("rollout@300"),)
    ).run()
    rollout = build_summary(result, seed=0)["rollout"]
    assert rollout["completed"] is True
    assert rollout["max_unavailable_seen"] == 2


def _example(
    name: str, cluster: str, duration: int, *events: str, rate: float = 2
) -> dict[str, Any]:
    spec = REPO_ROOT / "examples" / "kube" / name
    docs = manifests_from_text(spec.read_text(), str(spec))
    loaded = load_cluster((REPO_ROOT / "examples" / "clusters" / cluster).read_text())
    options = Options(duration_s=duration, events=tuple(parse_event(e) for e in events))
    result = Simulation(scenario_from_manifests(docs, None), loaded, constant(rate), options).run()
    return build_summary(result, seed=0)


def test_statefulset_rolls_one_ordinal_at_a_time() -> None:
    summary = _example("mig-statefulset.yaml", "gpu-operator.yaml", 3600, "rollout@900")
    rollout = summary["rollout"]
    assert rollout["completed"] is True
    assert rollout["max_unavailable_seen"] == 1


def test_keda_fallback_when_metrics_fail() -> None:
    # Light load keeps the service at its floor (2); fallback (min + 1, currentReplicasIfHigher)
    # raises it to 3 while the metrics are down.
    summary = _example(
        "llm-gpu-keda-canary.yaml", "eks.yaml", 1800, "metrics-down@600:300", rate=0.2
    )
    reasons = [e["reason"] for e in summary["scale_events"]]
    assert any(r.endswith(": fallback") for r in reasons), reasons
    # The office-hours service is at zero outside its window: since KEDA 2.17 fallback acts
    # through the HPA, which is inactive at zero, so the outage does not wake it.
    summary = _example("dev-gpu-office-hours.yaml", "aks.yaml", 1800, "metrics-down@600:300")
    reasons = [e["reason"] for e in summary["scale_events"]]
    assert reasons == ["keda dev-chat: cooldown"], reasons


def test_same_seed_same_run_other_seed_other_arrivals() -> None:
    def run(seed: int) -> dict[str, Any]:
        docs = [deployment("serve", 2, SERVE, load_s=30)]
        sim = Simulation(
            scenario_from_manifests(docs, None),
            gpu_cluster(3),
            constant(20),
            Options(duration_s=600, seed=seed),
        )
        return build_summary(sim.run(), seed=seed)

    first, again, other = run(1), run(1), run(2)
    assert first == again
    assert first["requests"]["offered"] != other["requests"]["offered"]


def test_idle_nodes_are_removed_by_the_autoscaler() -> None:
    cluster = gpu_cluster(4, extra={"min": 1, "max": 4})
    result = simulation([deployment("serve", 1, SERVE, load_s=10)], cluster, 1500).run()
    nodes = result.timeline["nodes"]
    assert nodes[0] == 4
    assert nodes[-1] == 1  # 3 empty nodes gone after 10 minutes unneeded


def test_other_tenants_hold_capacity_and_lower_priority_ones_are_preempted() -> None:
    cluster = gpu_cluster(
        2,
        extra={},
    )
    doc = cluster.model_dump(by_alias=True, mode="json")
    doc["spec"]["pods"] = [
        {
            "name": "batch",
            "count": 1,
            "nodePool": "gpu",
            "requests": {"nvidia.com/gpu": 1},
            "priority": -5,
        },
        {"name": "critical", "count": 1, "requests": {"nvidia.com/gpu": 1}, "priority": 1000},
    ]
    cluster = load_cluster(yaml.safe_dump(doc))
    sim = simulation([deployment("serve", 1, SERVE, load_s=10)], cluster, 300, rate=1)
    result = sim.run()
    assert any("preempts batch-0" in text for _, text in sim.world.log)
    assert not any("critical" in text for _, text in sim.world.log)
    assert result.timeline["replicas_ready"][-1] == 1
    assert result.timeline["gpus_in_use"][-1] == 1  # other tenants' GPUs are not the input's
