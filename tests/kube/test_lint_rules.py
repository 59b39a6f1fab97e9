"""Semantics of the issue-11 rules beyond their two fixtures: defaults the cluster applies,
the signals each rule accepts as proof, and the cases each rule must leave alone."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.lint.rules.wake import metrics_in
from podserve.kube.yamlio import parse_documents
from tests.kube.paths import FIXTURES

LINT_FIXTURES = FIXTURES / "lint"


def found(text: str, rule_id: str) -> list[str]:
    documents = parse_documents(text, "test.yaml")
    return [
        f.message for f in lint_documents(documents, ALL_RULES).findings if f.rule_id == rule_id
    ]


def deployment(pod: str = "", *, annotations: str = "{}", replicas: int = 1) -> str:
    return f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: llm, namespace: ml}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: llm}}}}
  template:
    metadata: {{labels: {{app: llm}}, annotations: {annotations}}}
    spec:
{pod or "      containers: [{name: server, image: ghcr.io/acme/server:1.2.0}]"}
"""


def scaled(triggers: str, extra: str = "") -> str:
    return f"""
---
apiVersion: keda.sh/v1alpha1
kind: ScaledObject
metadata: {{name: llm, namespace: ml}}
spec:
  scaleTargetRef: {{name: llm}}
{extra}
  triggers:
{triggers}
"""


UPSTREAM = (
    '    - {type: prometheus, metadata: {serverAddress: "http://p:9090", '
    'query: "sum(rate(envoy_cluster_upstream_rq_total[1m]))", threshold: "5"}}'
)
CRON = (
    '    - {type: cron, metadata: {timezone: UTC, start: "0 7 * * *", end: "0 19 * * *", '
    'desiredReplicas: "1"}}'
)


def test_promql_metric_names() -> None:
    query = (
        'sum(rate(envoy_cluster_upstream_rq_total{envoy_cluster_name=~"a.*"}[1m])) '
        "+ sum by (x) (rate(envoy_cluster_upstream_cx_none_healthy[5m]))"
    )
    assert metrics_in(query) == {
        "envoy_cluster_upstream_rq_total",
        "envoy_cluster_upstream_cx_none_healthy",
    }
    assert metrics_in("vllm:num_requests_waiting") == {"vllm:num_requests_waiting"}
    by_name = 'sum(rate({__name__=~"envoy_cluster_upstream_rq_total|podserve_x",a="b"}[2m]))'
    assert metrics_in(by_name) == {"envoy_cluster_upstream_rq_total", "podserve_x"}
    assert metrics_in('sum({__name__=~"envoy_.*"})') == {"?"}


def test_activation_defaults_and_independent_triggers() -> None:
    # KEDA's minReplicaCount defaults to 0: an omitted floor can go to zero.
    assert found(scaled(UPSTREAM), "activation-metric-needs-endpoints")
    # A cron window or a floor of one wakes (or never sleeps) whatever the metric.
    assert not found(scaled(f"{UPSTREAM}\n{CRON}"), "activation-metric-needs-endpoints")
    assert not found(scaled(UPSTREAM, "  minReplicaCount: 1"), "activation-metric-needs-endpoints")
    queue = '    - {type: rabbitmq, metadata: {queueName: jobs, mode: QueueLength, value: "5"}}'
    # Upstream counters named through __name__ still need endpoints; adding the no-healthy-
    # upstream counter to the selection is what lets the service wake.
    by_name = UPSTREAM.replace(
        "sum(rate(envoy_cluster_upstream_rq_total[1m]))",
        "sum(rate({__name__=~'envoy_cluster_upstream_rq_total'}[1m]))",
    )
    assert found(scaled(by_name), "activation-metric-needs-endpoints")
    woken = by_name.replace(
        "'envoy_cluster_upstream_rq_total'",
        "'envoy_cluster_upstream_rq_total|envoy_cluster_upstream_cx_none_healthy'",
    )
    assert not found(scaled(woken), "activation-metric-needs-endpoints")
    assert not found(scaled(queue), "activation-metric-needs-endpoints")


def test_pdb_weak_at_scale_counts_the_ceiling() -> None:
    pdb = """
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: llm, namespace: ml}
spec: {selector: {matchLabels: {app: llm}}, minAvailable: MIN}
"""
    fixed = deployment(replicas=3)
    assert found(fixed + pdb.replace("MIN", "1"), "pdb-weak-at-scale")
    assert not found(fixed + pdb.replace("MIN", "2"), "pdb-weak-at-scale")
    assert not found(fixed + pdb.replace("MIN", '"75%"'), "pdb-weak-at-scale")


def test_scale_up_slower_than_down_uses_hpa_defaults() -> None:
    hpa = """
---
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: llm, namespace: ml}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: llm}
  minReplicas: 2
  maxReplicas: 8
  metrics:
    - type: Pods
      pods: {metric: {name: podserve_queue_depth}, target: {type: AverageValue, averageValue: "8"}}
"""
    assert not found(deployment() + hpa, "scale-up-slower-than-down")
    disabled = hpa + "  behavior: {scaleUp: {selectPolicy: Disabled}}\n"
    assert found(deployment() + disabled, "scale-up-slower-than-down")


@pytest.mark.parametrize(
    ("image", "policy", "fires"),
    [
        ("ghcr.io/acme/server", None, True),  # no tag: :latest, defaulted to Always
        ("ghcr.io/acme/server:latest", None, True),
        ("ghcr.io/acme/server:1.2.0", None, False),
        ("ghcr.io/acme/server@sha256:" + "a" * 64, None, False),
        ("localhost:5000/server:1.2.0", "Always", True),
    ],
)
def test_effective_pull_policy(image: str, policy: str | None, fires: bool) -> None:
    line = f"imagePullPolicy: {policy}, " if policy else ""
    pod = (
        f"      containers: [{{name: server, image: '{image}', {line}"
        "resources: {limits: {nvidia.com/gpu: '1'}}}]"
    )
    assert bool(found(deployment(pod), "pull-always-on-gpu")) is fires


def test_gpu_labels_per_provider_and_strategy() -> None:
    def pod(selector: str, resource: str = "nvidia.com/gpu") -> str:
        return (
            f"      nodeSelector: {{{selector}}}\n"
            "      containers: [{name: server, image: s:1, resources: "
            f"{{limits: {{{resource}: '1'}}}}}}]"
        )

    gke_mig = pod("cloud.google.com/gke-gpu-partition-size: 1g.10gb", "nvidia.com/mig-1g.10gb")
    assert (
        "advertises MIG partitions as nvidia.com/gpu"
        in found(deployment(gke_mig), "gpu-label-mismatch")[0]
    )
    proven = pod(
        "karpenter.sh/capacity-type: on-demand, nvidia.com/gpu.product: NVIDIA-L4, "
        "nvidia.com/gpu.present: 'true'"
    )
    assert not found(deployment(proven), "gpu-label-mismatch")
    unproven = pod("karpenter.sh/capacity-type: on-demand, nvidia.com/gpu.product: NVIDIA-L4")
    assert (
        "only when GFD or the GPU Operator runs"
        in found(deployment(unproven), "gpu-label-mismatch")[0]
    )
    other_profile = pod("nvidia.com/mig-2g.20gb.product: X", "nvidia.com/mig-1g.10gb")
    assert "by profile 2g.20gb" in found(deployment(other_profile), "gpu-label-mismatch")[0]
    plain = pod("nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB")  # no provider: GFD's own
    assert not found(deployment(plain), "gpu-label-mismatch")


def test_device_memory_from_labels_and_products() -> None:
    def pod(selector: str, count: int) -> str:
        return (
            f"      nodeSelector: {{{selector}}}\n"
            "      containers: [{name: server, image: s:1, resources: {limits: "
            f"{{memory: 400Gi, nvidia.com/gpu: '{count}'}}}}}}]"
        )

    # 140Gi: within the 90% of 2 x 80Gi counted as usable (144Gi), above one GPU's 72Gi.
    size = "{podserve.dev/model-size: 140Gi}"
    two_a100 = deployment(pod("nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB", 2), annotations=size)
    assert not found(two_a100, "model-exceeds-device")
    one_a100 = deployment(pod("nvidia.com/gpu.product: NVIDIA-A100-SXM4-80GB", 1), annotations=size)
    assert (
        "nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB" in found(one_a100, "model-exceeds-device")[0]
    )
    # Karpenter's label is MiB per GPU (g5: A10G, 22888 MiB).
    a10g = deployment(pod("karpenter.k8s.aws/instance-gpu-memory: '22888'", 4), annotations=size)
    assert found(a10g, "model-exceeds-device")
    unknown = deployment(pod("kubernetes.io/arch: amd64", 1), annotations=size)
    assert not found(unknown, "model-exceeds-device")  # nothing names the device: no guess


def test_fetch_credentials_by_source() -> None:
    def pod(uri: str, extra: str = "", labels: str = "") -> str:
        return (
            "      serviceAccountName: fetcher\n"
            f"      initContainers: [{{name: fetch, image: s:1, args: [fetch, '{uri}']{extra}}}]\n"
            "      containers: [{name: server, image: s:1}]"
        )

    def account(annotations: str) -> str:
        return (
            "\n---\napiVersion: v1\nkind: ServiceAccount\n"
            f"metadata: {{name: fetcher, namespace: ml, annotations: {{{annotations}}}}}\n"
        )

    gcs = deployment(pod("gs://bucket/model"))
    assert found(gcs, "fetch-without-credentials")
    wi = account("iam.gke.io/gcp-service-account: m@p.iam.gserviceaccount.com")
    assert not found(gcs + wi, "fetch-without-credentials")
    secret = deployment(pod("s3://bucket/m", ", envFrom: [{secretRef: {name: aws}}]"))
    assert not found(secret, "fetch-without-credentials")
    azure = deployment(pod("az://container/m")) + account("azure.workload.identity/client-id: x")
    # Azure's webhook mutates only pods labelled azure.workload.identity/use: "true".
    assert found(azure, "fetch-without-credentials")
    labelled = azure.replace(
        "labels: {app: llm}", "labels: {app: llm, azure.workload.identity/use: 'true'}"
    )
    assert not found(labelled, "fetch-without-credentials")
    assert not found(deployment(pod("https://example.com/m.onnx")), "fetch-without-credentials")
    # Azure Blob as podserve fetch and KServe take it: an https URL on the blob endpoint.
    blob = deployment(pod("https://acct1.blob.core.windows.net/models/m"))
    assert found(blob, "fetch-without-credentials")
    sas = ", env: [{name: AZURE_STORAGE_SAS_TOKEN, valueFrom: {secretKeyRef: {name: s, key: k}}}]"
    blob_sas = deployment(pod("https://acct1.blob.core.windows.net/models/m", sas))
    assert not found(blob_sas, "fetch-without-credentials")


def test_retries_with_linkerd() -> None:
    text = """
apiVersion: v1
kind: Service
metadata:
  name: llm
  namespace: ml
  annotations: {retry.linkerd.io/http: 5xx, retry.linkerd.io/limit: "3"}
spec: {selector: {app: llm}, ports: [{name: http, port: 8000}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm, namespace: ml}
spec:
  rules: [{backendRefs: [{name: llm, port: 8000}], retry: {attempts: 2}}]
"""
    [message] = found(text, "retries-in-two-layers")
    assert "Linkerd retries it 3 times more" in message
    assert "12 times" in message


def test_non_production_markers() -> None:
    gpu = (
        "      containers: [{name: server, image: s:1, resources: {limits: {nvidia.com/gpu: '1'}}}]"
    )
    staging = deployment(gpu).replace("labels: {app: llm}", "labels: {app: llm, env: staging}")
    assert "label env=staging" in found(staging, "nonprod-gpu-always-on")[0]
    production = staging.replace("env: staging", "env: production")
    assert not found(production, "nonprod-gpu-always-on")
    cpu_only = deployment().replace("labels: {app: llm}", "labels: {app: llm, env: dev}")
    assert not found(cpu_only, "nonprod-gpu-always-on")


def test_required_anti_affinity_is_hard_spread() -> None:
    required = """
          requiredDuringSchedulingIgnoredDuringExecution:
            - {topologyKey: kubernetes.io/hostname, labelSelector: {matchLabels: {app: llm}}}"""
    pod = f"""      affinity:
        podAntiAffinity:{required}
          preferredDuringSchedulingIgnoredDuringExecution:
            - weight: 50
              podAffinityTerm:
                topologyKey: topology.kubernetes.io/zone
                labelSelector: {{matchLabels: {{app: llm}}}}
      containers: [{{name: server, image: s:1}}]"""
    assert not found(deployment(pod, replicas=3), "soft-spread-only")
    soft = pod.replace(required, "")
    assert found(deployment(soft, replicas=3), "soft-spread-only")


def test_generative_caps_of_other_servers() -> None:
    tgi = (
        "      containers: [{name: tgi, image: ghcr.io/huggingface/text-generation-inference:3.0,"
        " env: [{name: MAX_CONCURRENT_REQUESTS, value: '64'},"
        " {name: MAX_TOTAL_TOKENS, value: '8192'}]}]"
    )
    assert not found(deployment(tgi), "generative-no-caps")
    half = tgi.replace(", {name: MAX_TOTAL_TOKENS, value: '8192'}", "")
    assert found(deployment(half), "generative-no-caps") == [
        "generative server has no cap on context length"
    ]
    vllm = (
        "      containers: [{name: v, image: vllm/vllm-openai:v0.10.1,"
        " args: [--max-num-seqs=64, --max-model-len, '8192']}]"
    )
    assert not found(deployment(vllm), "generative-no-caps")


def test_podserve_output_is_checked_through_its_stored_spec() -> None:
    # podserve render stores the ModelService in the ConfigMap the pods mount; the size,
    # generative flag and the canary's own model are read from there when no annotation
    # says so, so the examples pass these rules on their merits.
    from podserve.kube.lint.context import LintContext
    from podserve.kube.lint.signals import model_size_bytes, stored_model
    from podserve.kube.render import render
    from podserve.kube.types import Document, Source
    from tests.kube.paths import EXAMPLES, load_example

    example = next(p for p in EXAMPLES if p.stem == "llm-gpu-keda-canary")
    manifests = [dict(m) for m in render(load_example(example)).manifests]
    documents = [Document(m, Source("rendered", 1)) for m in manifests]
    ctx = LintContext.build(documents)
    stable = next(p for p in ctx.pods if p.name == "llama")
    canary = next(p for p in ctx.pods if p.name == "llama-canary")
    assert stored_model(ctx, stable)["uri"] != stored_model(ctx, canary)["uri"]
    assert model_size_bytes(ctx, stable) == 16 * 2**30
    assert lint_documents(documents, ALL_RULES).findings == ()

    server = next(c for c in stable.pod["containers"] if c["name"] == "server")
    server["resources"]["limits"]["memory"] = server["resources"]["requests"]["memory"] = "12Gi"
    server["env"] = [e for e in server["env"] if "MAX_CONTEXT" not in e["name"]]
    found_ids = {f.rule_id for f in lint_documents(documents, ALL_RULES).findings}
    assert {"memory-below-model-size", "generative-no-caps"} <= found_ids


def test_non_production_gpu_service_needs_its_active_hours() -> None:
    from podserve.config.model_service import ModelService
    from podserve.kube.render import render
    from podserve.kube.types import Document, Source
    from tests.kube.paths import EXAMPLES, load_example

    example = next(p for p in EXAMPLES if p.stem == "dev-gpu-office-hours")
    document = load_example(example).to_document()
    document["metadata"]["labels"] = {"environment": "dev"}

    def lint(doc: dict[str, object]) -> set[str]:
        manifests = render(ModelService.model_validate(doc)).manifests
        documents = [Document(m, Source("rendered", 1)) for m in manifests]
        return {f.rule_id for f in lint_documents(documents, ALL_RULES).findings}

    assert "nonprod-gpu-always-on" not in lint(document)  # the cron window is rendered
    del document["spec"]["autoscaling"]["activeHours"]
    assert "nonprod-gpu-always-on" in lint(document)


def test_grpc_route_must_reach_the_grpc_port() -> None:
    base = (LINT_FIXTURES / "grpc-without-l7-route" / "fail.yaml").read_text()
    service = base.replace(
        "ports: [{name: grpc, port: 8001, appProtocol: kubernetes.io/h2c}]",
        "ports: [{name: http, port: 8000},"
        " {name: grpc, port: 8001, appProtocol: kubernetes.io/h2c}]",
    )
    route = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm, namespace: ml}
spec:
  rules: [{backendRefs: [{name: llm, port: PORT}]}]
"""
    # An HTTPRoute to the HTTP port leaves the gRPC port at L4.
    assert found(service + route.replace("PORT", "8000"), "grpc-without-l7-route")
    assert not found(service + route.replace("PORT", "8001"), "grpc-without-l7-route")


def _paths(node: object, path: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    found = [path] if path else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*path, index))
    return found


def _rendered_nodes() -> tuple[list[list[dict[str, Any]]], list[tuple[int, int, tuple[Any, ...]]]]:
    from podserve.kube.apiserver import server_problems
    from podserve.kube.render import render
    from tests.kube.paths import EXAMPLES, load_example

    examples = [list(render(load_example(e)).manifests) for e in EXAMPLES]
    # cel-python raises the recursion limit when its first Environment is built; do that
    # before Hypothesis starts watching the limit.
    assert server_problems([m for manifests in examples for m in manifests]) == []
    nodes = [
        (e, i, p)
        for e, manifests in enumerate(examples)
        for i, m in enumerate(manifests)
        for p in _paths(m)
    ]
    return examples, nodes


_EXAMPLES, _NODES = _rendered_nodes()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(_NODES),
    st.sampled_from([None, 0, -1, "x", [], {}, True, 1.5, "0.5", ["a"], {"a": 1}]),
)
def test_wrong_types_are_reported_never_raised(
    node: tuple[int, int, tuple[Any, ...]], value: object
) -> None:
    """A field of the wrong type anywhere in a rendered example: lint (over the whole
    example), the API-server checks and the CEL rules report problems, none of them raises."""
    import copy

    from podserve.kube.apiserver import server_problems
    from podserve.kube.types import Document, Source

    example, index, path = node
    manifests = copy.deepcopy(_EXAMPLES[example])
    parent: Any = manifests[index]
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    lint_documents([Document(m, Source("mutated", 1)) for m in manifests], ALL_RULES)
    server_problems(manifests)
