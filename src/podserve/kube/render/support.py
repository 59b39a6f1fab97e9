"""The objects around the workload: ConfigMap (server settings and the spec itself),
ServiceAccount, NetworkPolicy, ResourceQuota and LimitRange."""

from __future__ import annotations

from typing import Any

import yaml

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.render.pod import serving_priority_class, settings_yaml
from podserve.kube.render.variant import labels, metadata
from podserve.kube.types import Manifest


def spec_yaml(service: ModelService) -> str:
    """The canonical spec: stored with the output so it can be rendered again (and so
    `podserve canary` can find the weights' source of truth)."""
    return yaml.safe_dump(service.to_document(), sort_keys=True, width=4096)


def config_map(service: ModelService) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(service, service.metadata.name, "server"),
        "data": {c.SPEC_FILE: spec_yaml(service), c.SETTINGS_FILE: settings_yaml(service)},
    }


def service_account(service: ModelService) -> Manifest:
    """The pods' ServiceAccount; workload identity (IRSA, GKE, Azure) is an annotation on
    it, so the fetch gets cloud credentials without a Secret (config/service_access.py)."""
    creds = service.spec.credentials
    annotations = creds.service_account_annotations() if creds is not None else None
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(service, service.metadata.name, "server", None, annotations),
        "automountServiceAccountToken": service.spec.service_account_token,
    }


SERVING_PRIORITY = 1000


def serving_priority_class_object(service: ModelService) -> Manifest:
    """Serving above batch and dev pods (0) and GPU headroom (-10): when GPUs run short the
    scheduler preempts those for a serving pod, never a serving pod for them."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {
            "name": serving_priority_class(service),
            "labels": labels(service, "server"),
        },
        "value": SERVING_PRIORITY,
        "globalDefault": False,
        "preemptionPolicy": "PreemptLowerPriority",
        "description": f"podserve serving pods of {service.metadata.namespace}/"
        f"{service.metadata.name}.",
    }


def network_policy(service: ModelService) -> Manifest:
    """Ingress only to the serving ports; egress stays open (the fetcher reaches storage)."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(service, service.metadata.name, "server"),
        "spec": {
            "podSelector": {
                "matchLabels": {c.NAME_LABEL: service.metadata.name, c.COMPONENT_LABEL: "server"}
            },
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "ports": [
                        {"port": c.HTTP_PORT, "protocol": "TCP"},
                        {"port": c.GRPC_PORT, "protocol": "TCP"},
                    ]
                }
            ],
        },
    }


def quota_objects(service: ModelService) -> list[Manifest]:
    quota = service.spec.quota
    if quota is None:
        return []
    hard: dict[str, Any] = {}
    if quota.gpus is not None:
        resource = service.spec.gpu.resource_name(service.spec.capacity.provider)
        hard[f"requests.{resource}"] = str(quota.gpus)
    if quota.cpu is not None:
        hard["requests.cpu"] = quota.cpu
    if quota.memory is not None:
        hard["requests.memory"] = quota.memory
    if quota.pods is not None:
        hard["pods"] = str(quota.pods)
    result: list[Manifest] = []
    if hard:
        result.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": metadata(service, service.metadata.name, "quota"),
                "spec": {"hard": dict(sorted(hard.items()))},
            }
        )
    if quota.limit_range:
        # With a quota on cpu/memory, a container without requests is refused; the
        # LimitRange gives such containers (sidecars, debug pods) defaults instead.
        result.append(
            {
                "apiVersion": "v1",
                "kind": "LimitRange",
                "metadata": metadata(service, service.metadata.name, "quota"),
                "spec": {
                    "limits": [
                        {
                            "type": "Container",
                            "default": {"cpu": "500m", "memory": "512Mi"},
                            "defaultRequest": {"cpu": "100m", "memory": "512Mi"},
                        }
                    ]
                },
            }
        )
    return result
