"""The `async:` section: a Deployment of `podserve consume`, a KEDA ScaledObject on the
`redis-streams` scaler, a TriggerAuthentication for the Redis password, and a
NetworkPolicy admitting only the metrics port.

KEDA's redis-streams scaler (kedacore/keda-docs content/docs/2.11/scalers/redis-streams.md,
the same keys in the latest docs; kedacore/keda pkg/scalers/redis_streams_scaler.go):
- `lagCount` reads XINFO GROUPS' `lag` (Redis 7+): entries not yet delivered to the group.
  At zero replicas nothing reads, so the lag grows with every XADD and crosses
  `activationLagCount`: the only mode that wakes a consumer from zero.
- `pendingEntriesCount` reads the group's PEL (delivered, unacknowledged): it is 0 while
  no consumer runs, so it never wakes one (lint: redis-streams-pending-no-wake).
- `authenticationRef` -> TriggerAuthentication `secretTargetRef` parameter `password`.
The consumers' pods carry no track label, so the serving Service, PDB and autoscaler never
select them; they need no Service (nothing calls them).
"""

from __future__ import annotations

import math
from typing import Any

from podserve.config.model_service import ModelService
from podserve.config.service_async import AsyncConsumer
from podserve.kube import conventions as c
from podserve.kube.plan import Plan
from podserve.kube.render.checkov import checkov_skips, fetch_lint_ignores, fetch_pod_reasons
from podserve.kube.render.monitoring import metrics_pod_monitor
from podserve.kube.render.placement import gpu_tolerations, node_affinity, node_selector
from podserve.kube.render.pod import (
    container_security,
    fetch_steps,
    identity_labels,
    pod_annotations,
    pod_security,
    resources,
    volumes,
)
from podserve.kube.render.variant import labels, metadata, variants
from podserve.kube.types import Manifest

COMPONENT = "consumer"
METRICS_PORT = 9100
LIVE_PATH = "/healthz"
READY_PATH = "/ready"
BLOCK_MS = 1000  # the consumer's longest read: how long SIGTERM may wait for it
PASSWORD_VOLUME = "redis-password"
PASSWORD_DIR = "/var/run/secrets/podserve/redis"


def drain_seconds(service: ModelService, queue: AsyncConsumer) -> int:
    """How long the claimed entries may take after SIGTERM: the read in progress, then up to
    two batches (one running, one formed behind it) of the longest request."""
    if queue.grace_seconds is not None:
        return max(1, queue.grace_seconds - service.spec.timing.margin_seconds)
    return math.ceil(BLOCK_MS / 1000 + 2 * service.spec.serving.longest_request_seconds)


def grace_seconds(service: ModelService, queue: AsyncConsumer) -> int:
    if queue.grace_seconds is not None:
        return queue.grace_seconds
    return drain_seconds(service, queue) + service.spec.timing.margin_seconds


def consumer_args(service: ModelService, queue: AsyncConsumer) -> list[str]:
    scheme = "rediss" if queue.redis.tls else "redis"
    args = [
        "consume",
        "--redis", f"{scheme}://{queue.redis.address}/{queue.redis.database}",
        "--stream", queue.stream,
        "--group", queue.group,
        "--results-stream", queue.results_stream,
        "--claim-idle-ms", str(queue.claim_idle_seconds * 1000),
        "--results-ttl-s", str(queue.results_retention_seconds),
        "--results-maxlen", str(queue.results_max_len),
        "--block-ms", str(BLOCK_MS),
        "--drain-timeout-s", str(drain_seconds(service, queue)),
        "--metrics-port", str(METRICS_PORT),
    ]  # fmt: skip
    if queue.redis.password is not None:
        args += ["--redis-password-file", f"{PASSWORD_DIR}/password"]
    if queue.dead_letter_stream is not None:
        args += ["--dead-letter-stream", queue.dead_letter_stream]
        args += ["--max-failures", str(queue.max_failures)]
        args += ["--dead-letter-maxlen", str(queue.dead_letter_max_len)]
    else:
        args += ["--max-failures", "0"]  # never dead-letter: what the spec asked for
    # The one flag without a value goes last, after every flag/value pair.
    args.append("--delete-acknowledged" if queue.delete_acknowledged else "--keep-acknowledged")
    return args


def _env(service: ModelService, queue: AsyncConsumer) -> list[dict[str, Any]]:
    stable = variants(service)[0]
    model_path = c.cached_model_path(stable.model.digest)
    env: list[dict[str, Any]] = [
        {"name": "PODSERVE_CACHE_DIR", "value": c.CACHE_DIR},
        {"name": "PODSERVE_LOG_FORMAT", "value": "json"},
        {"name": "PODSERVE_MAX_QUEUE", "value": str(service.spec.serving.max_queue)},
        {
            "name": "PODSERVE_MODELS",
            "value": f"{stable.model_name}={model_path}:{stable.model.runtime}",
        },
    ]
    return env


def _password_volume(queue: AsyncConsumer) -> dict[str, Any] | None:
    """The Redis password as a file, not an environment variable: variables leak into
    crash dumps, `/proc/<pid>/environ` and child processes (checkov CKV_K8S_35). Group
    readable only; the pod's fsGroup owns the file."""
    secret = queue.redis.password
    if secret is None:
        return None
    return {
        "name": PASSWORD_VOLUME,
        "secret": {
            "secretName": secret.secret,
            "items": [{"key": secret.key, "path": "password"}],
            "defaultMode": 0o440,
        },
    }


def _deployment(service: ModelService, plan: Plan, queue: AsyncConsumer) -> Manifest:
    spec = service.spec
    name = f"{service.metadata.name}-{COMPONENT}"
    # The fetch init container reads Azure Blob with workload identity only when the
    # webhook mutates the pod, which it does for labelled pods (pod.py identity_labels).
    pod_labels = {**labels(service, COMPONENT), **identity_labels(service)}
    mounts: list[dict[str, Any]] = [
        {"name": "cache", "mountPath": c.CACHE_DIR, "readOnly": True},
        {"name": "dshm", "mountPath": "/dev/shm"},
        {"name": "tmp", "mountPath": "/tmp"},
    ]
    pod_volumes = volumes(service, plan, with_config=False)
    password = _password_volume(queue)
    if password is not None:
        mounts.append({"name": PASSWORD_VOLUME, "mountPath": PASSWORD_DIR, "readOnly": True})
        pod_volumes.append(password)
    container = {
        "name": COMPONENT,
        "image": spec.image.ref,
        "imagePullPolicy": spec.image.pull_policy,
        "command": ["podserve"],
        "args": consumer_args(service, queue),
        "env": _env(service, queue),
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "resources": resources(service, plan),
        # The metrics listener answers from the event loop that runs the consume loop, and
        # starts before the model loads: a wedged loop fails liveness, a long load does not.
        "startupProbe": _probe(LIVE_PATH, failures=30),
        "livenessProbe": _probe(LIVE_PATH, failures=6),
        # Ready once the models are loaded and it consumes; gates only the rollout.
        "readinessProbe": _probe(READY_PATH, failures=3),
        "securityContext": container_security(),
        "volumeMounts": mounts,
    }
    pod: dict[str, Any] = {
        "serviceAccountName": service.metadata.name,
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_seconds(service, queue),
        "securityContext": pod_security(),
        "initContainers": fetch_steps(service, spec.model, spec.image),
        "containers": [container],
        "volumes": pod_volumes,
    }
    selector = node_selector(spec)
    if selector:
        pod["nodeSelector"] = selector
    tolerations = gpu_tolerations(spec)
    if tolerations:
        pod["tolerations"] = tolerations
    affinity = node_affinity(spec, plan.spot, prefer_spot=None)
    if affinity:
        pod["affinity"] = affinity
    annotations = {**checkov_skips(fetch_pod_reasons(service)), **_lint_ignores(service)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(service, name, COMPONENT, None, annotations),
        "spec": {
            # No replicas: KEDA owns the count, and `kubectl apply` must not reset it.
            "selector": {
                "matchLabels": {c.NAME_LABEL: service.metadata.name, c.COMPONENT_LABEL: COMPONENT}
            },
            # Consumers answer no traffic: replace them one at a time, never all at once,
            # and what a stopped one claimed is finished by it or claimed by another.
            "strategy": {
                "type": "RollingUpdate",
                "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
            },
            "revisionHistoryLimit": 5,
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    "annotations": pod_annotations(service, spec.model),
                },
                "spec": pod,
            },
        },
    }


def _probe(path: str, *, failures: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": METRICS_PORT},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": failures,
    }


def _lint_ignores(service: ModelService) -> dict[str, str]:
    """The fetch's ignores, plus no-prestop-delay: no load balancer sends a consumer
    anything, so there is no endpoint removal to wait for before SIGTERM."""
    fetch = fetch_lint_ignores(service)
    ids = [i for i in fetch.get(c.LINT_IGNORE, "").split(",") if i] + ["no-prestop-delay"]
    reasons = [r for r in [fetch.get(c.LINT_IGNORE_REASON)] if r]
    reasons.append("no-prestop-delay: a consumer pulls from Redis and is behind no load balancer")
    return {c.LINT_IGNORE: ",".join(ids), c.LINT_IGNORE_REASON: "; ".join(reasons)}


def _scaled_object(service: ModelService, queue: AsyncConsumer) -> Manifest:
    name = f"{service.metadata.name}-{COMPONENT}"
    trigger_meta = {
        "address": queue.redis.address,
        "databaseIndex": str(queue.redis.database),
        "stream": queue.stream,
        "consumerGroup": queue.group,
        "enableTLS": "true" if queue.redis.tls else "false",
    }
    if queue.scale_on == "lag":
        trigger_meta["lagCount"] = str(queue.target_per_replica)
        trigger_meta["activationLagCount"] = str(queue.activation)
    else:
        trigger_meta["pendingEntriesCount"] = str(queue.target_per_replica)
    trigger: dict[str, Any] = {"type": "redis-streams", "metadata": trigger_meta}
    if queue.redis.password is not None:
        trigger["authenticationRef"] = {"name": name}
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": metadata(service, name, COMPONENT),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "pollingInterval": queue.polling_interval_seconds,
            "cooldownPeriod": queue.cooldown_seconds,
            "minReplicaCount": queue.min_replicas,
            "maxReplicaCount": queue.max_replicas,
            # cooldownPeriod covers only 1 -> 0; N -> N-1 follows the HPA's behavior, and
            # every replica removed is one whose model load a later burst pays again.
            "advanced": {
                "horizontalPodAutoscalerConfig": {
                    "name": f"keda-hpa-{name}",
                    "behavior": {
                        "scaleDown": {"stabilizationWindowSeconds": queue.cooldown_seconds}
                    },
                }
            },
            "triggers": [trigger],
        },
    }


def _trigger_authentication(service: ModelService, queue: AsyncConsumer) -> Manifest | None:
    secret = queue.redis.password
    if secret is None:
        return None
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "TriggerAuthentication",
        "metadata": metadata(service, f"{service.metadata.name}-{COMPONENT}", COMPONENT),
        "spec": {
            "secretTargetRef": [{"parameter": "password", "name": secret.secret, "key": secret.key}]
        },
    }


def _network_policy(service: ModelService) -> Manifest:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": metadata(service, f"{service.metadata.name}-{COMPONENT}", COMPONENT),
        "spec": {
            "podSelector": {
                "matchLabels": {c.NAME_LABEL: service.metadata.name, c.COMPONENT_LABEL: COMPONENT}
            },
            "policyTypes": ["Ingress"],
            "ingress": [{"ports": [{"port": METRICS_PORT, "protocol": "TCP"}]}],
        },
    }


def _selector(service: ModelService) -> dict[str, str]:
    return {c.NAME_LABEL: service.metadata.name, c.COMPONENT_LABEL: COMPONENT}


def _pod_monitor(service: ModelService) -> Manifest:
    """The consumers' /metrics on their `metrics` port, labelled as the server's monitor
    labels its series (`service`), plus `component="consumer"` in place of a track: the
    serving autoscaler's queries select `track`, so consumer series never feed it. The
    server's monitor selects these pods too (by name) but finds no `http` port on them."""
    return metrics_pod_monitor(
        service,
        f"{service.metadata.name}-{COMPONENT}",
        _selector(service),
        "metrics",
        {c.NAME_LABEL: "service", c.COMPONENT_LABEL: "component"},
    )


def consumer_objects(service: ModelService, plan: Plan) -> list[Manifest]:
    queue = service.spec.async_
    if queue is None:
        return []
    objects = [_deployment(service, plan, queue), _scaled_object(service, queue)]
    auth = _trigger_authentication(service, queue)
    if auth is not None:
        objects.append(auth)
    if service.spec.network_policy:
        objects.append(_network_policy(service))
    if service.spec.monitoring.pod_monitor:
        objects.append(_pod_monitor(service))
    return objects
