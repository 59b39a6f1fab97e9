"""Deployment or StatefulSet, its Service and its PodDisruptionBudget, per variant."""

from __future__ import annotations

import math
from typing import Any

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.plan import STARTUP_PERIOD_S, Plan, startup_failure_threshold
from podserve.kube.render.checkov import checkov_skips, fetch_lint_ignores, fetch_pod_reasons
from podserve.kube.render.pod import serving_pod_template
from podserve.kube.render.variant import Variant, metadata
from podserve.kube.types import Manifest


def _strategy(service: ModelService, plan: Plan) -> dict[str, Any]:
    if service.spec.rollout.strategy == "Recreate":
        return {"type": "Recreate"}
    return {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": plan.max_surge, "maxUnavailable": plan.max_unavailable},
    }


def _claim_template(service: ModelService) -> dict[str, Any]:
    cache = service.spec.cache
    size = cache.size or f"{math.ceil((service.spec.model.size_gi or 1) * 1.25)}Gi"
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": size}},
    }
    if cache.storage_class:
        spec["storageClassName"] = cache.storage_class
    return {"metadata": {"name": "cache"}, "spec": spec}


def workload(service: ModelService, variant: Variant, plan: Plan) -> Manifest:
    spec = service.spec
    kind = spec.workload
    annotations = {**checkov_skips(fetch_pod_reasons(service)), **fetch_lint_ignores(service)}
    if plan.spare_gpu and spec.gpu.count:
        annotations[c.SPARE_GPU] = "true"
    body: dict[str, Any] = {}
    if variant.fixed_replicas is not None:
        # Omitted when an autoscaler owns the count, so `kubectl apply` never resets it.
        body["replicas"] = variant.fixed_replicas
    body["selector"] = {"matchLabels": variant.selector(service)}
    if kind == "StatefulSet":
        body["serviceName"] = f"{variant.name}-headless"
        body["podManagementPolicy"] = "Parallel"
        if spec.rollout.strategy == "Recreate":
            body["updateStrategy"] = {"type": "OnDelete"}
        else:
            body["updateStrategy"] = {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": 1},
            }
    else:
        body["strategy"] = _strategy(service, plan)
        # A rollout waits out a full model load per pod; the 600 s default would report
        # ProgressDeadlineExceeded for slow loads (kubernetes-semantics.md §2).
        budget = startup_failure_threshold(variant.model.load_seconds) * STARTUP_PERIOD_S
        body["progressDeadlineSeconds"] = max(600, budget * 2 + 60)
    body["revisionHistoryLimit"] = 5
    body["template"] = serving_pod_template(service, variant, plan)
    if kind == "StatefulSet" and spec.cache.kind == "pvc":
        body["volumeClaimTemplates"] = [_claim_template(service)]
        body["persistentVolumeClaimRetentionPolicy"] = {
            "whenDeleted": "Retain",
            "whenScaled": "Retain",
        }
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": metadata(service, variant.name, "server", variant.track, annotations),
        "spec": body,
    }


def service_object(service: ModelService, variant: Variant) -> Manifest:
    spec: dict[str, Any] = {
        "type": "ClusterIP",
        "selector": variant.selector(service),
        "ports": [
            {
                "name": "http",
                "port": c.HTTP_PORT,
                "targetPort": "http",
                "protocol": "TCP",
                "appProtocol": "http",
            },
        ],
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(service, variant.name, "server", variant.track),
        "spec": spec,
    }


def grpc_service(service: ModelService, variant: Variant) -> Manifest:
    """gRPC gets a headless Service: kube-proxy balances connections, not requests, and a
    gRPC client multiplexes every call over one long-lived HTTP/2 connection, so through a
    ClusterIP each client would pin all its calls to one pod (kubernetes.io blog, "gRPC Load
    Balancing on Kubernetes without Tears"). With the pods' addresses in DNS, clients
    balance per call (`dns:///<name>-grpc.<namespace>:8001` with round_robin), or an L7
    GRPCRoute does it for them."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(service, f"{variant.name}-grpc", "server", variant.track),
        "spec": {
            "clusterIP": "None",
            "selector": variant.selector(service),
            "ports": [
                {
                    "name": "grpc",
                    "port": c.GRPC_PORT,
                    "targetPort": "grpc",
                    "protocol": "TCP",
                    "appProtocol": "kubernetes.io/h2c",
                }
            ],
        },
    }


def headless_service(service: ModelService, variant: Variant) -> Manifest:
    """The governing Service of a StatefulSet: stable per-pod DNS names (`<pod>.<svc>`),
    for shards that must find each other. It publishes unready pods for that reason."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(service, f"{variant.name}-headless", "server", variant.track),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": variant.selector(service),
            "ports": [
                {"name": "http", "port": c.HTTP_PORT, "targetPort": "http", "protocol": "TCP"}
            ],
        },
    }


def pdb_budget(service: ModelService, variant: Variant) -> dict[str, int | str]:
    """maxUnavailable (1 unless the spec says otherwise) at any scale: minAvailable = min - 1
    would let a drain take 7 of 8 pods of a service scaled out to 8 (kubernetes-semantics.md
    §4). A one-replica canary gets maxUnavailable 1 as well: a drain may take it, and until
    it is back its share of traffic fails (docs/kubernetes.md, "Disruption"); blocking the
    drain instead would hold a node hostage to an experiment."""
    given = service.spec.disruption
    if given.min_available is not None and variant.track == "stable":
        return {"minAvailable": given.min_available}
    if given.max_unavailable is not None:
        return {"maxUnavailable": given.max_unavailable}
    return {"maxUnavailable": 1}


def pdb(service: ModelService, variant: Variant) -> Manifest:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": metadata(service, variant.name, "server", variant.track),
        "spec": {
            **pdb_budget(service, variant),
            "selector": {"matchLabels": variant.selector(service)},
            # A pod stuck unready (crash-looping, never loaded) must not block a node drain.
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
