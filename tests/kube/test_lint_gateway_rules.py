"""The podserve gateway's lint rules on hand-written manifests: which file a gateway pod
reads as its config (`gateway-replicas-without-shared-store`), and whose proxy retries its
requests to the pools (`retries-in-two-layers`)."""

from __future__ import annotations

from typing import Any

import pytest

from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.yamlio import parse_documents

STORE_RULE = "gateway-replicas-without-shared-store"
RETRY_RULE = "retries-in-two-layers"
SQLITE = "store: {kind: sqlite, path: /data/gateway.db}"
SHARED = "store: {kind: redis-postgres, redisEnv: REDIS_URL, postgresEnv: POSTGRES_DSN}"


def found(text: str, rule_id: str) -> list[str]:
    documents = parse_documents(text, "test.yaml")
    return [
        f.message for f in lint_documents(documents, ALL_RULES).findings if f.rule_id == rule_id
    ]


def config_map(name: str, store: str, *, key: str = "gateway.yaml", endpoint: str = "") -> str:
    endpoint = endpoint or "http://llm.ml.svc:8000"
    return f"""
apiVersion: v1
kind: ConfigMap
metadata: {{name: {name}, namespace: ml}}
data:
  {key}: |
    {store}
    pools:
      - {{name: chat, models: [tiny-lm], endpoints: ["{endpoint}"]}}
---"""


def gateway(
    *,
    run: str = "args: [gateway, --config, /etc/gw/gateway.yaml]",
    mounts: str = "[{name: config, mountPath: /etc/gw}]",
    volumes: str = "[{name: config, configMap: {name: gw-config}}]",
    replicas: int = 3,
    labels: str = "{app: gw}",
    annotations: str = "{}",
    env: str = "[]",
) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: gw, namespace: ml}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: gw}}}}
  template:
    metadata: {{labels: {labels}, annotations: {annotations}}}
    spec:
      containers:
        - name: gateway
          image: ghcr.io/podserve/podserve:0.1.0
          {run}
          env: {env}
          volumeMounts: {mounts}
      volumes: {volumes}
"""


# --- gateway-replicas-without-shared-store: the --config path resolved to a key ---------


@pytest.mark.parametrize(
    ("store_key", "volumes"),
    [
        # items: the key `cfg` is laid out as the file gateway.yaml
        (
            "cfg",
            "[{name: config, configMap: {name: gw-config, "
            "items: [{key: cfg, path: gateway.yaml}]}}]",
        ),
        # a projected volume with a configMap source
        (
            "gateway.yaml",
            "[{name: config, projected: {sources: [{configMap: {name: gw-config}}]}}]",
        ),
        (
            "cfg",
            "[{name: config, projected: {sources: [{secret: {name: s}}, "
            "{configMap: {name: gw-config, items: [{key: cfg, path: gateway.yaml}]}}]}}]",
        ),
    ],
)
def test_the_config_is_found_through_items_and_projected_volumes(
    store_key: str, volumes: str
) -> None:
    text = config_map("gw-config", SQLITE, key=store_key) + gateway(volumes=volumes)
    [message] = found(text, STORE_RULE)
    assert f"ConfigMap gw-config ({store_key}, read as /etc/gw/gateway.yaml)" in message


@pytest.mark.parametrize(
    "run",
    [
        "command: [sh, -c]\n"
        '          args: ["exec podserve gateway --config /etc/gw/gateway.yaml --port 8080"]',
        'command: [/bin/bash, -ec, "podserve gateway --config=/etc/gw/gateway.yaml"]',
        "command: [python, -m, podserve.cli.main]\n"
        "          args: [gateway, --config, /etc/gw/gateway.yaml]",
        "command: [/app/.venv/bin/podserve, gateway, --config, /etc/gw/gateway.yaml]",
        # the kubelet expands $(VAR) from the container's env
        "args: [gateway, --config, $(CONFIG)]",
        'command: [sh, -c, "podserve gateway --config ${CONFIG}"]',
    ],
)
def test_the_gateway_command_is_recognised_in_its_usual_forms(run: str) -> None:
    env = "[{name: CONFIG, value: /etc/gw/gateway.yaml}]"
    text = config_map("gw-config", SQLITE) + gateway(run=run, env=env)
    assert found(text, STORE_RULE)


def test_other_podserve_commands_are_not_the_gateway() -> None:
    run = "args: [gateway, keys, list, --config, /etc/gw/gateway.yaml]"
    assert not found(config_map("gw-config", SQLITE) + gateway(run=run), STORE_RULE)
    run = 'command: [sh, -c, "echo podserve; gateway --config /etc/gw/gateway.yaml"]'
    assert not found(config_map("gw-config", SQLITE) + gateway(run=run), STORE_RULE)


def test_only_the_file_at_the_config_path_counts() -> None:
    """A ConfigMap with an SQLite gateway.yaml mounted elsewhere is not what the gateway
    reads; the one at --config is."""
    mounts = "[{name: config, mountPath: /etc/gw}, {name: backup, mountPath: /var/backup}]"
    volumes = (
        "[{name: config, configMap: {name: gw-config}}, "
        "{name: backup, configMap: {name: old-backup}}]"
    )
    shared_in_use = config_map("gw-config", SHARED) + config_map("old-backup", SQLITE)
    assert not found(shared_in_use + gateway(mounts=mounts, volumes=volumes), STORE_RULE)
    sqlite_in_use = config_map("gw-config", SQLITE) + config_map("old-backup", SHARED)
    [message] = found(sqlite_in_use + gateway(mounts=mounts, volumes=volumes), STORE_RULE)
    assert "ConfigMap gw-config" in message
    # the mount at the path decides, not the ConfigMap's name or key
    elsewhere = "args: [gateway, --config, /var/backup/gateway.yaml]"
    assert not found(
        sqlite_in_use + gateway(run=elsewhere, mounts=mounts, volumes=volumes), STORE_RULE
    )


def test_sub_path_and_nested_mounts_are_laid_out_as_the_kubelet_does() -> None:
    sub = "[{name: config, mountPath: /etc/gw/gateway.yaml, subPath: gateway.yaml}]"
    assert found(config_map("gw-config", SQLITE) + gateway(mounts=sub), STORE_RULE)
    # a deeper mount over /etc/gw hides the ConfigMap mounted at /etc
    hidden = "[{name: config, mountPath: /etc}, {name: scratch, mountPath: /etc/gw}]"
    volumes = "[{name: config, configMap: {name: gw-config}}, {name: scratch, emptyDir: {}}]"
    run = "args: [gateway, --config, /etc/gateway.yaml]"
    assert found(
        config_map("gw-config", SQLITE) + gateway(run=run, mounts=hidden, volumes=volumes),
        STORE_RULE,
    )
    run = "args: [gateway, --config, /etc/gw/gateway.yaml]"
    assert not found(
        config_map("gw-config", SQLITE) + gateway(run=run, mounts=hidden, volumes=volumes),
        STORE_RULE,
    )


# --- retries-in-two-layers: the gateway's retries through its own sidecar ---------------


def namespace(labels: str = "{}", annotations: str = "{}") -> str:
    return f"""
apiVersion: v1
kind: Namespace
metadata: {{name: ml, labels: {labels}, annotations: {annotations}}}
---"""


SERVICE = """
---
apiVersion: v1
kind: Service
metadata: {name: llm, namespace: ml}
spec: {selector: {app: llm}, ports: [{name: http, port: 8000}]}
"""
BACKEND_INJECTED = """
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: llm, namespace: ml}
spec:
  selector: {matchLabels: {app: llm}}
  template:
    metadata:
      labels: {app: llm, sidecar.istio.io/inject: "true"}
      annotations: {sidecar.istio.io/inject: "true"}
    spec:
      containers: [{name: server, image: ghcr.io/acme/server:1.2.0}]
"""


def virtual_service(attempts: int) -> str:
    return f"""
---
apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {{name: llm, namespace: ml}}
spec:
  hosts: [llm.ml.svc.cluster.local]
  http:
    - route: [{{destination: {{host: llm.ml.svc.cluster.local}}}}]
      retries: {{attempts: {attempts}}}
"""


def front(*, before: str = "", store: str = SHARED, endpoint: str = "", **pod: Any) -> str:
    return before + config_map("gw-config", store, endpoint=endpoint) + gateway(**pod) + SERVICE


@pytest.mark.parametrize(
    ("before", "pod"),
    [
        (namespace("{istio-injection: enabled}"), {}),
        (namespace("{istio.io/rev: canary}"), {}),
        ("", {"labels": '{app: gw, sidecar.istio.io/inject: "true"}'}),
        (namespace(), {"labels": "{app: gw, istio.io/rev: default}"}),
        # the Namespace is not among the objects: the pod's own annotation is believed
        ("", {"annotations": '{sidecar.istio.io/inject: "true"}'}),
    ],
)
def test_the_gateway_in_the_mesh_is_retried_by_its_sidecar(
    before: str, pod: dict[str, str]
) -> None:
    [message] = found(front(before=before, **pod), RETRY_RULE)
    assert "retries pool chat (retryBudgetRatio 0.2)" in message
    assert "Istio's default retry policy retries ml/llm 2 times more" in message
    assert "up to 3.6 times its requests" in message


@pytest.mark.parametrize(
    ("before", "pod"),
    [
        (namespace(), {}),  # no injection anywhere
        (
            namespace("{istio-injection: enabled}"),
            {"labels": '{app: gw, sidecar.istio.io/inject: "false"}'},
        ),
        (
            namespace("{istio-injection: enabled}"),
            {"annotations": '{sidecar.istio.io/inject: "false"}'},
        ),
        (
            namespace("{istio-injection: disabled}"),
            {"labels": '{app: gw, sidecar.istio.io/inject: "true"}'},
        ),
        # the deprecated annotation alone does not call the webhook (istio/istio#34082)
        (namespace(), {"annotations": '{sidecar.istio.io/inject: "true"}'}),
    ],
)
def test_a_gateway_istio_does_not_inject_is_one_layer(before: str, pod: dict[str, str]) -> None:
    assert not found(front(before=before, **pod), RETRY_RULE)


def test_injected_backends_alone_add_no_layer() -> None:
    """Istio retries in the caller's sidecar: pool pods with a sidecar, behind a gateway
    (podserve or a Gateway API route) without one, are retried once."""
    assert not found(front() + BACKEND_INJECTED, RETRY_RULE)
    route = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm, namespace: ml}
spec:
  parentRefs: [{name: gw}]
  rules: [{backendRefs: [{name: llm, port: 8000}], retry: {attempts: 2}}]
"""
    assert not found(SERVICE + BACKEND_INJECTED + route, RETRY_RULE)
    assert not found(namespace("{istio-injection: enabled}") + SERVICE + route, RETRY_RULE)
    # a mesh VirtualService's retries apply to every meshed caller: still reported
    [message] = found(SERVICE + route + virtual_service(3), RETRY_RULE)
    assert "VirtualService llm retries it 3 times more" in message


def test_the_mesh_policy_for_the_pool_decides_the_sidecar_layer() -> None:
    injected = namespace("{istio-injection: enabled}")
    [message] = found(front(before=injected) + virtual_service(3), RETRY_RULE)
    assert "VirtualService llm retries ml/llm 3 times more" in message
    assert "4.8 times" in message
    assert not found(front(before=injected) + virtual_service(0), RETRY_RULE)
    no_budget = SHARED + "\n    routing: {retryBudgetRatio: 0}"
    assert not found(front(before=injected, store=no_budget), RETRY_RULE)


@pytest.mark.parametrize(
    ("endpoint", "fires"),
    [
        ("http://llm:8000", True),  # a Service in the gateway's namespace
        ("http://llm.ml:8000", True),
        ("http://llm.ml.svc.cluster.local:8000", True),
        ("https://llm.ml.svc:8443", False),  # TLS: the sidecar cannot read it to retry
        ("http://10.1.2.3:8000", False),  # a pod IP, not a Service route
        ("http://llm.example.com:8000", False),  # not a cluster Service
    ],
)
def test_which_pool_endpoints_the_sidecar_retries(endpoint: str, fires: bool) -> None:
    injected = namespace("{istio-injection: enabled}")
    assert bool(found(front(before=injected, endpoint=endpoint), RETRY_RULE)) is fires


def test_linkerd_retries_in_the_gateways_proxy() -> None:
    annotated = SERVICE.replace(
        "namespace: ml}",
        'namespace: ml, annotations: {retry.linkerd.io/http: 5xx, retry.linkerd.io/limit: "3"}}',
    )
    text = config_map("gw-config", SHARED) + gateway() + annotated
    assert not found(text, RETRY_RULE)  # the gateway is not meshed
    meshed = namespace(annotations="{linkerd.io/inject: enabled}") + text
    [message] = found(meshed, RETRY_RULE)
    assert "Linkerd retries ml/llm 3 times more" in message
