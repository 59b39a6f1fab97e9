"""Cold-start helpers. A pre-pull DaemonSet puts the image (and, for a hostPath cache, the
weights) on every GPU node before a pod needs them. Headroom placeholders are pause pods at
a negative priority holding GPUs: a surge or scale-up pod preempts one and starts at once
instead of waiting for a node (the reason `spareGpu` defaults to true when they exist)."""

from __future__ import annotations

from typing import Any

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.capacity import spot_pool
from podserve.kube.plan import Plan
from podserve.kube.render.checkov import checkov_skips, fetch_lint_ignores, fetch_pod_reasons
from podserve.kube.render.placement import (
    gpu_affinity,
    gpu_tolerations,
    node_selector,
    spot_tolerations,
    spread_constraints,
)
from podserve.kube.render.pod import (
    cache_volume,
    container_security,
    credential_volumes,
    fetch_steps,
    identity_labels,
    pod_security,
)
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
    """The serving pods' node constraints, so that pre-pull and headroom pods land on the
    nodes the serving pods will use: on spot serving that includes the spot taint's
    toleration (GKE taints spot nodes `cloud.google.com/gke-spot=true:NoSchedule` when
    asked, AKS always `kubernetes.azure.com/scalesetpriority=spot:NoSchedule`), without
    which a headroom pod would stay Pending and hold nothing."""
    placed: dict[str, Any] = {}
    selector = node_selector(service.spec)
    if selector:
        placed["nodeSelector"] = selector
    required = gpu_affinity(service.spec)
    if required:
        placed["affinity"] = {"nodeAffinity": required}
    tolerations = gpu_tolerations(service.spec)
    if service.spec.capacity.serving.value == "spot":
        tolerations += spot_tolerations(spot_pool(service.spec.capacity.provider))
    if tolerations:
        placed["tolerations"] = tolerations
    return placed


def deny_policy(service: ModelService, name: str, track: str, *, egress: bool) -> Manifest:
    """A NetworkPolicy selecting an auxiliary pod with no ingress rule (nothing may connect
    to it); with `egress` False it may not connect anywhere either."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(service, name, track),
        "spec": {
            "podSelector": {
                "matchLabels": {c.NAME_LABEL: service.metadata.name, c.TRACK_LABEL: track}
            },
            "policyTypes": ["Ingress"] if egress else ["Ingress", "Egress"],
        },
    }


def prepull_objects(service: ModelService) -> list[Manifest]:
    """The DaemonSet and its deny-ingress NetworkPolicy (egress stays open: the fetch
    reaches the model store)."""
    name = f"{service.metadata.name}-prepull"
    return [prepull_daemonset(service), deny_policy(service, name, "prepull", egress=True)]


def prepull_daemonset(service: ModelService) -> Manifest:
    spec = service.spec
    name = f"{service.metadata.name}-prepull"
    pod_labels = {
        **labels(service, "prepull"),
        c.TRACK_LABEL: "prepull",
        **identity_labels(service),
    }
    init: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = [{"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}]
    skips = {
        "CKV_K8S_8": "pause container: nothing to probe, it only keeps the pod scheduled",
        "CKV_K8S_9": "pause container: nothing to probe, it only keeps the pod scheduled",
    }
    if spec.cache.kind == "hostPath":
        volume = cache_volume(service)
        assert volume is not None
        volumes.append(volume)
        volumes += credential_volumes(service)
        # The serving pods run the same two steps; here they fill the node ahead of them.
        init += fetch_steps(service, spec.model, spec.image)
        skips.update(fetch_pod_reasons(service))
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
    if spec.credentials is not None:
        # The fetch may need workload identity, bound to the service's ServiceAccount.
        pod["serviceAccountName"] = service.metadata.name
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": metadata(
            service,
            name,
            "prepull",
            None,
            {**checkov_skips(skips), **fetch_lint_ignores(service)},
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
    gpus = {spec.gpu.resource_name(spec.capacity.provider): str(spec.gpu.count)}
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
        "topologySpreadConstraints": spread_constraints(
            spec, selector, floor=count, kind="Deployment"
        ),
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
                **checkov_skips(
                    {
                        "CKV_K8S_8": "pause pod holding a GPU: nothing to probe",
                        "CKV_K8S_9": "pause pod holding a GPU: nothing to probe",
                    }
                ),
            },
        ),
        "spec": {
            "replicas": count,
            "selector": {"matchLabels": selector},
            "strategy": {"type": "Recreate"},
            "template": {"metadata": {"labels": dict(sorted(pod_labels.items()))}, "spec": pod},
        },
    }
    return [priority_class, deployment, deny_policy(service, name, "headroom", egress=False)]
