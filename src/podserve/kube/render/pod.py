"""The serving pod: three probes on three endpoints, a preStop sleep and a grace period
computed from the same numbers as the server's drain timeout, whole GPUs with request =
limit, memory request = limit including /dev/shm, a fetch init container and a hardened,
read-only container running as the image's user."""

from __future__ import annotations

import hashlib
from typing import Any

from podserve.config.model_service import Image, ModelService, ModelSource
from podserve.config.service_access import GCP_KEY_DIR, GCP_KEY_FILE
from podserve.kube import conventions as c
from podserve.kube.plan import (
    LIVENESS_FAILURES,
    LIVENESS_PERIOD_S,
    READINESS_FAILURES,
    READINESS_PERIOD_S,
    STARTUP_PERIOD_S,
    Plan,
    cache_cap_bytes,
    startup_failure_threshold,
)
from podserve.kube.render.placement import (
    gpu_tolerations,
    node_affinity,
    node_selector,
    spot_tolerations,
    spread_constraints,
)
from podserve.kube.render.variant import Variant
from podserve.kube.types import Manifest

FETCH_MEMORY = "1Gi"
TMP_SIZE = "1Gi"


def container_security() -> dict[str, Any]:
    return {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
        "runAsUser": c.USER_ID,
        "runAsGroup": c.GROUP_ID,
        "capabilities": {"drop": ["ALL"]},
    }


def pod_security() -> dict[str, Any]:
    return {
        "runAsNonRoot": True,
        "runAsUser": c.USER_ID,
        "runAsGroup": c.GROUP_ID,
        "fsGroup": c.GROUP_ID,
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _probe(path: str, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {
        "httpGet": {"path": path, "port": "http"},
        "periodSeconds": period,
        "failureThreshold": failures,
        "timeoutSeconds": timeout,
    }


def resources(service: ModelService, plan: Plan) -> dict[str, Any]:
    spec = service.spec
    requests: dict[str, Any] = {"cpu": plan.cpu_request, "memory": plan.memory}
    limits: dict[str, Any] = {"cpu": plan.cpu_limit, "memory": plan.memory}
    if spec.gpu.count:
        resource = spec.gpu.resource_name(spec.capacity.provider)
        requests[resource] = str(spec.gpu.count)
        limits[resource] = str(spec.gpu.count)
    return {"requests": requests, "limits": limits}


def _credential_env(service: ModelService) -> dict[str, Any]:
    """The Secret-backed environment of the fetch (and only the fetch)."""
    creds = service.spec.credentials
    if creds is None:
        return {}
    result: dict[str, Any] = {}
    if creds.secret:
        result["envFrom"] = [{"secretRef": {"name": creds.secret}}]
    env: list[dict[str, Any]] = [
        {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.secret, "key": ref.key}}}
        for name, ref in sorted(creds.env.items())
    ]
    if creds.gcp_key_secret is not None:
        # google-auth's default chain reads the key file this names (google.auth.default).
        env.append(
            {"name": "GOOGLE_APPLICATION_CREDENTIALS", "value": f"{GCP_KEY_DIR}/{GCP_KEY_FILE}"}
        )
    if env:
        result["env"] = env
    return result


def credential_volumes(service: ModelService) -> list[dict[str, Any]]:
    """The key-file Secret of `credentials.gcpKeySecret`, for the pods that run the fetch:
    a file, not an environment variable, because google-auth reads a path (and checkov's
    CKV_K8S_35 prefers secrets as files)."""
    creds = service.spec.credentials
    if creds is None or creds.gcp_key_secret is None:
        return []
    ref = creds.gcp_key_secret
    return [
        {
            "name": "gcp-key",
            "secret": {"secretName": ref.secret, "items": [{"key": ref.key, "path": GCP_KEY_FILE}]},
        }
    ]


def _credential_mounts(service: ModelService) -> list[dict[str, Any]]:
    return [
        {"name": v["name"], "mountPath": GCP_KEY_DIR, "readOnly": True}
        for v in credential_volumes(service)
    ]


def fetch_container(
    service: ModelService, model: ModelSource, image: str, pull_policy: str
) -> dict[str, Any]:
    """The init container: the same image, verifying the digest into the cache volume,
    with the fetch credentials, the cache cap, and a re-hash of pinned hits on a node
    path other pods can write to."""
    cache = service.spec.cache
    args = ["fetch", model.uri, "--digest", model.digest, "--cache-dir", c.CACHE_DIR]
    cap = cache_cap_bytes(service.spec)
    if cap is not None:
        args += ["--cache-max-bytes", str(cap)]
    if cache.kind == "hostPath":
        args.append("--verify-hit")
    return {
        "name": "fetch",
        "image": image,
        "imagePullPolicy": pull_policy,
        "command": ["podserve"],
        "args": args,
        **_credential_env(service),
        "resources": {
            "requests": {"cpu": "500m", "memory": FETCH_MEMORY},
            "limits": {"cpu": "2", "memory": FETCH_MEMORY},
        },
        "securityContext": container_security(),
        "volumeMounts": [
            {"name": "cache", "mountPath": c.CACHE_DIR},
            {"name": "tmp", "mountPath": "/tmp"},
            *_credential_mounts(service),
        ],
    }


def cache_owner_container(service: ModelService) -> dict[str, Any]:
    """The kubelet creates a hostPath directory root-owned (0755) and fsGroup does not
    apply to hostPath volumes (kubernetes.io/docs/concepts/storage/volumes/#hostpath), so
    the fetch, uid 10001, would get EACCES. This step runs as root with CHOWN as its only
    capability and hands the namespace's directory to the fetch's user."""
    image = service.spec.image
    return {
        "name": "cache-owner",
        "image": image.ref,
        "imagePullPolicy": image.pull_policy,
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


def fetch_steps(service: ModelService, model: ModelSource, image: Image) -> list[dict[str, Any]]:
    """The init containers of every pod that mounts the cache: the owner step first when
    the cache is a node path, then the fetch."""
    steps = []
    if service.spec.cache.kind == "hostPath":
        steps.append(cache_owner_container(service))
    steps.append(fetch_container(service, model, image.ref, image.pull_policy))
    return steps


def host_cache_path(service: ModelService) -> str:
    """One directory per namespace: tenants on a node never share (or overwrite) entries."""
    return f"{service.spec.cache.host_path.rstrip('/')}/{service.metadata.namespace}"


def cache_volume(service: ModelService) -> dict[str, Any] | None:
    """The cache volume, or None when a StatefulSet gets it from a claim template."""
    cache = service.spec.cache
    if cache.kind == "hostPath":
        return {
            "name": "cache",
            "hostPath": {"path": host_cache_path(service), "type": "DirectoryOrCreate"},
        }
    if cache.kind == "emptyDir":
        empty: dict[str, Any] = {"sizeLimit": cache.size} if cache.size else {}
        return {"name": "cache", "emptyDir": empty}
    if service.spec.workload == "StatefulSet":
        return None
    return {"name": "cache", "persistentVolumeClaim": {"claimName": cache.claim_name}}


def settings_yaml(service: ModelService) -> str:
    """The server's settings file (keys of podserve.config.settings.ServerSettings)."""
    spec = service.spec
    lines = [
        'host: "0.0.0.0"',
        f"port: {c.HTTP_PORT}",
        f"grpc_port: {c.GRPC_PORT}",
        f"max_queue: {spec.serving.max_queue}",
        f"cache_dir: {c.CACHE_DIR}",
        "log_format: json",
    ]
    return "\n".join(lines) + "\n"


def config_checksum(service: ModelService) -> str:
    return hashlib.sha256(settings_yaml(service).encode()).hexdigest()[:16]


def server_env(service: ModelService, variant: Variant, plan: Plan) -> list[dict[str, str]]:
    spec = service.spec
    model_path = c.cached_model_path(variant.model.digest)
    env = {
        "PODSERVE_MODELS": f"{variant.model_name}={model_path}:{variant.model.runtime}",
        # Drain = longest request: the grace period is preStop + this + margin, so the drain
        # ends before the kubelet's SIGKILL (kubernetes-semantics.md §3).
        "PODSERVE_DRAIN_TIMEOUT_S": str(plan.drain_timeout_s),
    }
    if spec.serving.max_concurrent_sequences is not None:
        env["PODSERVE_MAX_CONCURRENT_SEQUENCES"] = str(spec.serving.max_concurrent_sequences)
    if spec.serving.max_context_tokens is not None:
        env["PODSERVE_MAX_CONTEXT_TOKENS"] = str(spec.serving.max_context_tokens)
    return [{"name": key, "value": value} for key, value in sorted(env.items())]


def server_container(service: ModelService, variant: Variant, plan: Plan) -> dict[str, Any]:
    return {
        "name": "server",
        "image": variant.image.ref,
        "imagePullPolicy": variant.image.pull_policy,
        "command": ["podserve"],
        "args": ["serve"],
        "ports": [
            {"name": "http", "containerPort": c.HTTP_PORT, "protocol": "TCP"},
            {"name": "grpc", "containerPort": c.GRPC_PORT, "protocol": "TCP"},
        ],
        "env": server_env(service, variant, plan),
        "resources": resources(service, plan),
        # The startup probe holds liveness and readiness off until the model is loaded; its
        # budget is 1.5 x the observed load time (kubernetes-semantics.md §3).
        "startupProbe": _probe(
            c.STARTUP_PATH,
            STARTUP_PERIOD_S,
            startup_failure_threshold(variant.model.load_seconds),
            5,
        ),
        "livenessProbe": _probe(c.LIVENESS_PATH, LIVENESS_PERIOD_S, LIVENESS_FAILURES, 5),
        "readinessProbe": _probe(c.READINESS_PATH, READINESS_PERIOD_S, READINESS_FAILURES, 3),
        # Native sleep action (beta, on by default since 1.30); docs/kubernetes.md gives the
        # `exec: sleep` fallback for older clusters.
        "lifecycle": {"preStop": {"sleep": {"seconds": plan.pre_stop_s}}},
        "securityContext": container_security(),
        "volumeMounts": [
            # Read-only: only the fetch writes the cache; the server maps what it verified.
            {"name": "cache", "mountPath": c.CACHE_DIR, "readOnly": True},
            {"name": "dshm", "mountPath": "/dev/shm"},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "config", "mountPath": c.SETTINGS_DIR, "readOnly": True},
        ],
    }


def volumes(service: ModelService, plan: Plan, *, with_config: bool) -> list[dict[str, Any]]:
    result = []
    cache = cache_volume(service)
    if cache is not None:
        result.append(cache)
    # tmpfs counts against the memory limit; the limit already includes this size.
    result.append({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": plan.shm}})
    result.append({"name": "tmp", "emptyDir": {"sizeLimit": TMP_SIZE}})
    result += credential_volumes(service)
    if with_config:
        result.append(
            {
                "name": "config",
                "configMap": {
                    "name": service.metadata.name,
                    "items": [{"key": c.SETTINGS_FILE, "path": c.SETTINGS_FILE}],
                },
            }
        )
    return result


def pod_annotations(service: ModelService, model: ModelSource) -> dict[str, str]:
    spec = service.spec
    return {
        c.CONFIG_CHECKSUM: config_checksum(service),
        c.LOAD_SECONDS: f"{model.load_seconds:g}",
        c.LONGEST_REQUEST_SECONDS: f"{spec.serving.longest_request_seconds:g}",
        c.MODEL_DIGEST: model.digest,
        c.MODEL_URI: model.uri,
    }


def serving_priority_class(service: ModelService) -> str:
    given = service.spec.priority_class_name
    return given or f"{service.metadata.namespace}-{service.metadata.name}-serving"


def identity_labels(service: ModelService) -> dict[str, str]:
    """Pod labels that workload-identity webhooks key on: Azure mutates only pods labelled
    `azure.workload.identity/use: "true"` (azure-workload-identity docs)."""
    creds = service.spec.credentials
    if creds is not None and creds.azure_client_id:
        return {"azure.workload.identity/use": "true"}
    return {}


def serving_pod_template(service: ModelService, variant: Variant, plan: Plan) -> Manifest:
    spec = service.spec
    selector = variant.selector(service)
    pod_labels = {
        **variant.selector(service),
        "app.kubernetes.io/component": "server",
        **identity_labels(service),
    }
    pod_spec: dict[str, Any] = {
        "serviceAccountName": service.metadata.name,
        "automountServiceAccountToken": spec.service_account_token,
        "enableServiceLinks": False,
        "priorityClassName": serving_priority_class(service),
        "terminationGracePeriodSeconds": plan.grace_period_s,
        "securityContext": pod_security(),
        "initContainers": fetch_steps(service, variant.model, variant.image),
        "containers": [server_container(service, variant, plan)],
        "volumes": volumes(service, plan, with_config=True),
    }
    node = node_selector(spec)
    if node:
        pod_spec["nodeSelector"] = node
    tolerations = gpu_tolerations(spec)
    on_spot = spec.capacity.serving.value == "spot"
    if on_spot:
        tolerations += spot_tolerations(plan.spot)
    affinity = node_affinity(spec, plan.spot, prefer_spot=None if on_spot else False)
    if affinity:
        pod_spec["affinity"] = affinity
    if tolerations:
        pod_spec["tolerations"] = tolerations
    floor = variant.fixed_replicas if variant.fixed_replicas is not None else spec.replicas.min
    spread = spread_constraints(spec, selector, floor=floor)
    if spread:
        pod_spec["topologySpreadConstraints"] = spread
    return {
        "metadata": {
            "labels": dict(sorted(pod_labels.items())),
            "annotations": pod_annotations(service, variant.model),
        },
        "spec": pod_spec,
    }
