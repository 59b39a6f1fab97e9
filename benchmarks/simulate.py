"""`podserve simulate` speed: simulated seconds per wall second, and peak memory, for 8 node
pools x 100 nodes and a 50-replica model under a 24-hour trace (target: >= 10,000x).

The workload exercises every controller: an HPA between 25 and 50 replicas on in-flight
requests, a PodDisruptionBudget, a rollout at 09:00, a spot reclaim of one pool at 14:00 and
the cluster autoscaler (every pool may shrink to 0 and grow back to 100).

    .venv/bin/python benchmarks/simulate.py [--duration 86400] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from podserve.kube.simulate import (
    Options,
    Simulation,
    build_summary,
    load_cluster,
    parse_event,
    scenario_from_manifests,
)
from podserve.kube.simulate.traffic import Trace

POOLS = 8
NODES_PER_POOL = 100
REPLICAS = 50
TARGET_RATIO = 10_000


def cluster_text() -> str:
    pools = []
    for i in range(POOLS):
        pools.append(
            {
                "name": f"pool-{i}",
                "count": NODES_PER_POOL,
                "min": 0,
                "max": NODES_PER_POOL,
                "labels": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
                "allocatable": {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": 1},
                "pricePerHourUsd": 0.85 if i else 0.3,
                "spot": i == 0,
                "provisioningSeconds": 240,
                "reclaimNoticeSeconds": 30,
                "podShutdownSeconds": 15,
                "zones": ["a", "b", "c"],
            }
        )
    return yaml.safe_dump(
        {
            "apiVersion": "podserve.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": "bench"},
            "spec": {"nodePools": pools},
        }
    )


def manifests() -> list[dict[str, Any]]:
    labels = {"app": "model"}
    container = {
        "name": "server",
        "image": "ghcr.io/podserve/podserve:bench",
        "ports": [{"name": "http", "containerPort": 8000}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": "http"}},
        "startupProbe": {
            "httpGet": {"path": "/startup", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": 30,
        },
        "lifecycle": {"preStop": {"sleep": {"seconds": 10}}},
        "env": [
            {"name": "PODSERVE_MAX_CONCURRENT_SEQUENCES", "value": "16"},
            {"name": "PODSERVE_MAX_CONTEXT_TOKENS", "value": "8192"},
            {"name": "PODSERVE_MAX_QUEUE", "value": "64"},
        ],
        "resources": {
            "requests": {"cpu": "4", "memory": "32Gi", "nvidia.com/gpu": "1"},
            "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        },
    }
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "model"},
            "spec": {
                "replicas": REPLICAS,
                "selector": {"matchLabels": labels},
                "strategy": {
                    "type": "RollingUpdate",
                    "rollingUpdate": {"maxSurge": "10%", "maxUnavailable": 0},
                },
                "template": {
                    "metadata": {
                        "labels": labels,
                        "annotations": {"podserve.dev/load-seconds": "120"},
                    },
                    "spec": {
                        "containers": [container],
                        "terminationGracePeriodSeconds": 45,
                        "tolerations": [
                            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
                        ],
                        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
                        "topologySpreadConstraints": [
                            {
                                "maxSkew": 1,
                                "topologyKey": "topology.kubernetes.io/zone",
                                "whenUnsatisfiable": "ScheduleAnyway",
                                "labelSelector": {"matchLabels": labels},
                            }
                        ],
                    },
                },
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "model"},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": labels}},
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "model"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "model"},
                "minReplicas": REPLICAS // 2,
                "maxReplicas": REPLICAS,
                "metrics": [
                    {
                        "type": "Pods",
                        "pods": {
                            "metric": {"name": "podserve_inflight_requests"},
                            "target": {"type": "AverageValue", "averageValue": "4"},
                        },
                    }
                ],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 600}},
            },
        },
    ]


def diurnal_day() -> Trace:
    """Per minute: a night trough, a day peak that needs all 50 replicas, some bursts."""
    points = []
    for minute in range(24 * 60):
        phase = math.sin((minute / (24 * 60)) * 2 * math.pi - math.pi / 2)
        rate = 12.0 + 10.0 * phase + (8.0 if minute % 97 == 0 else 0.0)
        points.append((minute * 60.0, round(max(rate, 0.5), 2)))
    return Trace(tuple(points))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=24 * 3600)
    parser.add_argument("--out", type=Path, help="also write summary/timeline/plot here")
    args = parser.parse_args()
    rss_before_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    cluster = load_cluster(cluster_text())
    scenario = scenario_from_manifests(manifests(), None)
    events = (parse_event("rollout@32400"), parse_event("spot-reclaim@50400:pool-0"))
    options = Options(duration_s=args.duration, seed=1, events=events)
    simulation = Simulation(scenario, cluster, diurnal_day(), options)
    built = time.perf_counter()
    result = simulation.run()
    ran = time.perf_counter()
    summary = build_summary(result, seed=1)
    done = time.perf_counter()
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    wall_s = done - start
    ratio = args.duration / wall_s
    report = {
        "nodes": POOLS * NODES_PER_POOL,
        "pools": POOLS,
        "replicas_max": REPLICAS,
        "simulated_s": args.duration,
        "wall_s": round(wall_s, 3),
        "setup_s": round(built - start, 3),
        "loop_s": round(ran - built, 3),
        "summary_s": round(done - ran, 3),
        "simulated_per_wall_s": round(ratio),
        "target": TARGET_RATIO,
        "meets_target": ratio >= TARGET_RATIO,
        "peak_rss_mib": round(peak_kb / 1024, 1),
        "rss_before_mib": round(rss_before_kb / 1024, 1),
        "scale_events": len(summary["scale_events"]),
        "requests": summary["requests"],
        "rollout_completed": (summary["rollout"] or {}).get("completed"),
    }
    if args.out is not None:
        from podserve.kube.simulate.output import write_outputs

        write_start = time.perf_counter()
        write_outputs(result, summary, args.out, "benchmark")
        report["write_outputs_s"] = round(time.perf_counter() - write_start, 3)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0 if report["meets_target"] else 1


if __name__ == "__main__":
    sys.exit(main())
