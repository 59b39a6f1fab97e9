"""The objects around the workload: ConfigMap (server settings and the spec itself),
ServiceAccount, NetworkPolicy, ResourceQuota and LimitRange."""

from __future__ import annotations

from typing import Any

import yaml

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.render.pod import settings_yaml
from podserve.kube.render.variant import metadata
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
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(service, service.metadata.name, "server"),
        "automountServiceAccountToken": service.spec.service_account_token,
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
        hard[f"requests.{service.spec.gpu.resource}"] = str(quota.gpus)
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
