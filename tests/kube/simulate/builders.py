"""Small manifests and clusters for the simulator's tests, built as plain data."""

from __future__ import annotations

from typing import Any

from podserve.kube.simulate import Cluster, Options, Simulation, constant, scenario_from_manifests
from podserve.kube.simulate.cluster import load_cluster
from podserve.kube.types import Manifest

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def gpu_cluster(nodes: int = 3, gpus: int = 1, extra: dict[str, Any] | None = None) -> Cluster:
    pool = {
        "name": "gpu",
        "count": nodes,
        "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"},
        "taints": [GPU_TAINT],
        "allocatable": {"cpu": "30", "memory": "200Gi", "nvidia.com/gpu": gpus},
        "pricePerHourUsd": 3.5,
        "imagePullSeconds": 60,
        **(extra or {}),
    }
    doc = {
        "apiVersion": "podserve.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": "test"},
        "spec": {"nodePools": [pool]},
    }
    import yaml

    return load_cluster(yaml.safe_dump(doc))


def pod_spec(
    gpus: int = 1,
    load_s: float = 60,
    grace_s: int = 30,
    priority_class: str | None = None,
    serves: bool = True,
    startup_failures: int = 30,
) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "server",
        "image": "ghcr.io/podserve/podserve:test",
        "resources": {
            "requests": {"cpu": "1", "memory": "4Gi", "nvidia.com/gpu": str(gpus)},
            "limits": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": str(gpus)},
        },
    }
    if serves:
        container["ports"] = [{"name": "http", "containerPort": 8000}]
        container["readinessProbe"] = {"httpGet": {"path": "/ready", "port": "http"}}
        container["startupProbe"] = {
            "httpGet": {"path": "/startup", "port": "http"},
            "periodSeconds": 10,
            "failureThreshold": startup_failures,
        }
        container["lifecycle"] = {"preStop": {"sleep": {"seconds": 5}}}
    spec: dict[str, Any] = {
        "containers": [container],
        "terminationGracePeriodSeconds": grace_s,
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    return spec


def deployment(
    name: str,
    replicas: int,
    labels: dict[str, str],
    surge: int | str = 1,
    unavailable: int | str = 0,
    strategy: str = "RollingUpdate",
    **pod: Any,
) -> Manifest:
    body: dict[str, Any] = {"type": strategy}
    if strategy == "RollingUpdate":
        body["rollingUpdate"] = {"maxSurge": surge, "maxUnavailable": unavailable}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "strategy": body,
            "template": {
                "metadata": {
                    "labels": labels,
                    "annotations": {"podserve.dev/load-seconds": str(pod.pop("load_s", 60))},
                },
                "spec": pod_spec(**pod),
            },
        },
    }


def pdb(name: str, labels: dict[str, str], **budget: Any) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": labels}, **budget},
    }


def headroom(replicas: int = 1) -> list[Manifest]:
    labels = {"app": "headroom"}
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "headroom"},
            "value": -10,
            "preemptionPolicy": "Never",
        },
        deployment(
            "headroom",
            replicas,
            labels,
            strategy="Recreate",
            priority_class="headroom",
            serves=False,
            load_s=0,
            grace_s=0,
        ),
    ]


SERVE = {"app": "serve"}


def reference_manifests(replicas: int = 2, with_headroom: bool = True) -> list[Manifest]:
    """The issue's reference setup: serving pods with a PDB minAvailable 1, optionally one
    GPU headroom pause pod at priority -10."""
    docs = [deployment("serve", replicas, SERVE), pdb("serve", SERVE, minAvailable=1)]
    return docs + (headroom() if with_headroom else [])


def simulation(
    docs: list[Manifest], cluster: Cluster, duration_s: int, rate: float = 0.0, **options: Any
) -> Simulation:
    scenario = scenario_from_manifests(docs, None)
    return Simulation(scenario, cluster, constant(rate), Options(duration_s=duration_s, **options))
