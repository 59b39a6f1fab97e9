"""`kind: Gateway` to manifests: ConfigMap, Deployment (>= 2 replicas, spread over nodes),
Service, PodDisruptionBudget, HPA on CPU, NetworkPolicy, and the PodMonitor and
PrometheusRule (`gateway_monitoring.py`). Secrets are referenced, never rendered: the
store URL/DSN and hosted API keys come from `secretKeyRef`s.

A gateway is a CPU-bound proxy that holds no model, so CPU utilisation is the right
autoscaling signal here (unlike a GPU model pod, where `hpa-cpu-on-gpu` objects).
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from podserve.config.gateway_spec import Gateway
from podserve.kube import conventions as c
from podserve.kube.order import in_apply_order
from podserve.kube.render.checkov import checkov_skips
from podserve.kube.render.gateway_checks import ROLLOUT_SURGE, check_gateway, most_replicas
from podserve.kube.render.gateway_monitoring import gateway_monitoring
from podserve.kube.render.pod import container_security, pod_security
from podserve.kube.types import Manifest

COMPONENT = "gateway"
# Why checkov's checks that do not apply are skipped (kube/render/checkov.py).
NO_CPU_LIMIT = (
    "no CPU limit on purpose: once a CFS quota is spent the proxy's one event loop is "
    "throttled for the rest of the 100 ms period, stalling every request in flight; the "
    "HPA scales on the CPU request (spec.cpu)"
)
SECRET_ENV = (
    "the gateway config names env vars for the store URL/DSN and hosted API keys "
    "(redisEnv, postgresEnv, apiKeyEnv: docs/gateway.md); only the gateway container "
    "gets them"
)
CONFIG_DIR = "/etc/podserve-gateway"
CONFIG_FILE = "gateway.yaml"


def _meta(gw: Gateway, name: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": gw.metadata.namespace,
        "labels": {
            c.NAME_LABEL: gw.metadata.name,
            c.COMPONENT_LABEL: COMPONENT,
            c.MANAGED_BY_LABEL: "podserve",
        },
    }


def _selector(gw: Gateway) -> dict[str, str]:
    return {c.NAME_LABEL: gw.metadata.name, c.COMPONENT_LABEL: COMPONENT}


def gateway_config_text(gw: Gateway) -> str:
    body = gw.spec.config.model_dump(mode="json", by_alias=True, exclude_none=True)
    return yaml.safe_dump(body, sort_keys=True)


def _probe(path: str, period: int, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": 2,
    }


def _env(gw: Gateway) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": s.env, "valueFrom": {"secretKeyRef": {"name": s.secret, "key": s.key}}}
        for s in gw.spec.secrets
    ]
    if gw.spec.egress_proxy is not None:  # read by config/egress_proxy.py in the gateway
        env += gw.spec.egress_proxy.env()
    return env


def _deployment(gw: Gateway, config_text: str) -> Manifest:
    spec = gw.spec
    checksum = hashlib.sha256(config_text.encode()).hexdigest()
    env = _env(gw)
    container = {
        "name": COMPONENT,
        "image": spec.image,
        "command": ["podserve"],
        "args": [COMPONENT, "--config", f"{CONFIG_DIR}/{CONFIG_FILE}", "--port", str(spec.port)],
        "ports": [{"name": "http", "containerPort": spec.port, "protocol": "TCP"}],
        "env": env,
        "resources": {
            "requests": {"cpu": spec.cpu, "memory": spec.memory},
            "limits": {"memory": spec.memory},
        },
        "startupProbe": _probe(c.READINESS_PATH, 2, 30),
        "readinessProbe": _probe(c.READINESS_PATH, 5, 2),
        "livenessProbe": _probe(c.LIVENESS_PATH, 10, 3),
        # Endpoints stop sending before the process stops taking connections.
        "lifecycle": {"preStop": {"sleep": {"seconds": 5}}},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
        "securityContext": container_security(),
    }
    reasons = {"CKV_K8S_11": NO_CPU_LIMIT}
    if spec.secrets:
        reasons["CKV_K8S_35"] = SECRET_ENV
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**_meta(gw, gw.metadata.name), "annotations": checkov_skips(reasons)},
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": _selector(gw)},
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": ROLLOUT_SURGE, "maxUnavailable": 0},
            },
            "template": {
                "metadata": {
                    "labels": _selector(gw),
                    "annotations": {c.CONFIG_CHECKSUM: checksum},
                },
                "spec": {
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": pod_security(),
                    "containers": [container],
                    "volumes": [
                        {"name": "config", "configMap": {"name": f"{gw.metadata.name}-config"}}
                    ],
                    # Never two replicas on one node (a node loss must not take the
                    # whole gateway); zones as a preference.
                    "topologySpreadConstraints": [
                        {
                            "maxSkew": 1,
                            "topologyKey": key,
                            "whenUnsatisfiable": when,
                            "labelSelector": {"matchLabels": _selector(gw)},
                            "matchLabelKeys": ["pod-template-hash"],
                        }
                        for key, when in (
                            (c.HOSTNAME_KEY, "DoNotSchedule"),
                            (c.ZONE_KEY, "ScheduleAnyway"),
                        )
                    ],
                },
            },
        },
    }


def render_gateway(gw: Gateway) -> tuple[Manifest, ...]:
    check_gateway(gw, [str(e["name"]) for e in _env(gw)])
    spec = gw.spec
    name = gw.metadata.name
    config_text = gateway_config_text(gw)
    objects: list[Manifest] = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _meta(gw, f"{name}-config"),
            "data": {CONFIG_FILE: config_text},
        },
        _deployment(gw, config_text),
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": _meta(gw, name),
            "spec": {
                "selector": _selector(gw),
                "ports": [
                    {"name": "http", "port": spec.port, "targetPort": "http", "protocol": "TCP"}
                ],
            },
        },
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": _meta(gw, name),
            "spec": {
                "maxUnavailable": 1,
                "selector": {"matchLabels": _selector(gw)},
                "unhealthyPodEvictionPolicy": "AlwaysAllow",
            },
        },
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": _meta(gw, name),
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": spec.replicas,
                "maxReplicas": most_replicas(gw),
                # Scale up at once; scale down slowly so a bursty hour keeps its capacity.
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": 0},
                    "scaleDown": {"stabilizationWindowSeconds": 600},
                },
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {
                                "type": "Utilization",
                                "averageUtilization": spec.target_cpu_percent,
                            },
                        },
                    }
                ],
            },
        },
        _network_policy(gw),
        *gateway_monitoring(gw, lambda object_name: _meta(gw, object_name), _selector(gw)),
    ]
    return tuple(in_apply_order(objects))


def _network_policy(gw: Gateway) -> Manifest:
    rule: dict[str, Any] = {"ports": [{"port": gw.spec.port, "protocol": "TCP"}]}
    if gw.spec.allow_from_namespaces:
        allowed = list(gw.spec.allow_from_namespaces)
        if gw.spec.monitoring.pod_monitor:  # Prometheus scrapes /metrics on the same port
            allowed += [ns for ns in gw.spec.monitoring.prometheus_namespaces if ns not in allowed]
        rule["from"] = [
            {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
            for ns in allowed
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _meta(gw, gw.metadata.name),
        "spec": {
            "podSelector": {"matchLabels": _selector(gw)},
            "policyTypes": ["Ingress"],
            "ingress": [rule],
        },
    }
