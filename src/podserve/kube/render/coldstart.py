"""Cold-start helpers. A pre-pull DaemonSet puts the image (and, for a hostPath cache, the
weights) on every GPU node before a pod needs them. Headroom placeholders are pause pods at
a negative priority holding GPUs: a surge or scale-up pod preempts one and starts at once
instead of waiting for a node (the reason `spareGpu` defaults to true when they exist)."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.plan import Plan
from podserve.kube.render.placement import gpu_tolerations, node_selector, spread_constraints
from podserve.kube.render.pod import container_security, fetch_container, pod_security
from podserve.kube.render.variant import labels, metadata
from podserve.kube.types import Manifest

HEADROOM_PRIORITY = -10
_PAUSE_RESOURCES = {
    "requests": {"cpu": "10m", "memory": "16Mi"},
    "limits": {"cpu": "10m", "memory": "16Mi"},
}


def _pause(resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "pause",
        "image": c.PAUSE_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "resources": resources,
        "securityContext": container_security(),
    }


def _placement(service: ModelService) -> dict[str, Any]:
    placed: dict[str, Any] = {}
    selector = node_selector(service.spec)
    if selector:
        placed["nodeSelector"] = selector
    tolerations = gpu_tolerations(service.spec)
    if tolerations:
        placed["tolerations"] = tolerations
    return placed


def prepull_daemonset(service: ModelService) -> Manifest:
    spec = service.spec
    name = f"{service.metadata.name}-prepull"
    pod_labels = {**labels(service, "prepull"), c.TRACK_LABEL: "prepull"}
    init: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
    if spec.cache.kind == "hostPath":
        volumes.append(
            {
                "name": "cache",
                "hostPath": {"path": spec.cache.host_path, "type": "DirectoryOrCreate"},
            }
        )
        # A hostPath directory is created root-owned; only this container runs as root, with
        # only the capabilities chown needs, so the serving pods can stay non-root.
        init.append(
            {
                "name": "cache-owner",
                "image": spec.image.ref,
                "imagePullPolicy": spec.image.pull_policy,
                "command": ["chown", f"{c.USER_ID}:{c.GROUP_ID}", c.CACHE_DIR],
                "resources": {
                    "requests": {"cpu": "10m", "memory": "32Mi"},
                    "limits": {"cpu": "100m", "memory": "32Mi"},
                },
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "runAsNonRoot": False,
                    "runAsUser": 0,
                    "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]},
                },
                "volumeMounts": [{"name": "cache", "mountPath": c.CACHE_DIR}],
            }
        )
        init.append(fetch_container(spec.model, spec.image.ref, spec.image.pull_policy))
    else:
        # Running the image once is what makes the kubelet pull it.
        init.append(
            {
                "name": "pull",
                "image": spec.image.ref,
                "imagePullPolicy": spec.image.pull_policy,
                "command": ["podserve", "--version"],
                "resources": _PAUSE_RESOURCES,
                "securityContext": container_security(),
            }
        )
    pod: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
        **_placement(service),
        "initContainers": init,
        "containers": [_pause(_PAUSE_RESOURCES)],
        "volumes": volumes,
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(
            service,
            name,
            "prepull",
            None,
            {
                c.LINT_IGNORE: "container-not-hardened",
                c.LINT_IGNORE_REASON: "cache-owner runs chown as root with only CAP_CHOWN",
            },
        ),
        "spec": {
            "selector": {
                "matchLabels": {c.NAME_LABEL: service.metadata.name, c.TRACK_LABEL: "prepull"}
            },
            "updateStrategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxUnavailable": "100%"},
            },
            "template": {"metadata": {"labels": dict(sorted(pod_labels.items()))}, "spec": pod},
        },
    }


def headroom_objects(service: ModelService, plan: Plan) -> list[Manifest]:
    count = service.spec.cold_start.headroom_pods
    if count == 0:
        return []
    spec = service.spec
    name = f"{service.metadata.name}-headroom"
    gpus = {spec.gpu.resource: str(spec.gpu.count)}
    pod_labels = {**labels(service, "headroom"), c.TRACK_LABEL: "headroom"}
    selector = {c.NAME_LABEL: service.metadata.name, c.TRACK_LABEL: "headroom"}
    pod: dict[str, Any] = {
        "priorityClassName": name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        # Preemption should hand the device over at once.
        "terminationGracePeriodSeconds": 0,
        "securityContext": pod_security(),
        **_placement(service),
        "topologySpreadConstraints": spread_constraints(spec, selector),
        "containers": [
            _pause(
                {
                    "requests": {"cpu": "10m", "memory": "16Mi", **gpus},
                    "limits": {"cpu": "10m", "memory": "16Mi", **gpus},
                }
            )
        ],
    }
    if not pod["topologySpreadConstraints"]:
        del pod["topologySpreadConstraints"]
    priority_class: Manifest = {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": f"{service.metadata.namespace}-{name}",
            "labels": labels(service, "headroom"),
        },
        "value": HEADROOM_PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "GPU placeholders for podserve; any pod at priority >= 0 preempts them.",
    }
    pod["priorityClassName"] = priority_class["metadata"]["name"]
    ignored = "no-pdb,no-prestop-delay,no-readiness-probe,no-shm-volume"
    deployment: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(
            service,
            name,
            "headroom",
            None,
            {
                c.LINT_IGNORE: ignored,
                c.LINT_IGNORE_REASON: "pause pods that only hold GPUs; they serve nothing",
                c.SPARE_GPU: "true",
            },
        ),
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": dict(sorted(pod_labels.items()))}, "spec": pod},
        },
    }
    return [priority_class, deployment]
