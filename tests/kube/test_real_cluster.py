"""Issue 11 §1: what a real cluster would have refused, stranded or never woken. Each test
asserts on the rendered objects (or the refusal) and would have failed on the manifests
the review found broken."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import ValidationError

from podserve.cli import fetch as fetch_cli
from podserve.config.model_service import ModelService, load_model_service
from podserve.core.errors import InvalidInput
from podserve.kube import conventions as c
from podserve.kube.capacity import spot_notice_for_label
from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.render import render
from podserve.kube.types import Manifest
from podserve.kube.yamlio import dump_all, parse_documents
from tests.kube.helpers import find, server
from tests.kube.paths import EXAMPLES, REPO_ROOT, load_example

LLM = next(p for p in EXAMPLES if p.name == "llm-gpu-keda-canary.yaml")
MIG = next(p for p in EXAMPLES if p.name == "mig-statefulset.yaml")
SPOT = next(p for p in EXAMPLES if p.name == "spot-scale-to-zero.yaml")
CPU = next(p for p in EXAMPLES if p.name == "sklearn-cpu-hpa.yaml")
DEV = next(p for p in EXAMPLES if p.name == "dev-gpu-office-hours.yaml")
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "Job", "CronJob"}


def edit(service: ModelService, **changes: Any) -> ModelService:
    """A copy with spec sections merged one level deep (validated again)."""
    document = service.to_document()
    for key, value in changes.items():
        current = document["spec"].get(key)
        if isinstance(current, dict) and isinstance(value, dict):
            current.update(value)
        else:
            document["spec"][key] = value
    return ModelService.model_validate(document)


def refused(service: ModelService, **changes: Any) -> str:
    with pytest.raises(ValidationError) as info:
        edit(service, **changes)
    return str(info.value)


def pod_templates(manifests: tuple[Manifest, ...]) -> Iterator[tuple[Manifest, dict[str, Any]]]:
    for m in manifests:
        if m["kind"] == "CronJob":
            yield m, m["spec"]["jobTemplate"]["spec"]["template"]
        elif m["kind"] in WORKLOADS:
            yield m, m["spec"]["template"]


def pod_of(manifests: tuple[Manifest, ...], kind: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = find(manifests, kind, name)["spec"]["template"]["spec"]
    return spec


# -- 1. MIG strategy ------------------------------------------------------------------


def test_mig_mixed_requests_the_profile_and_selects_its_own_product_label() -> None:
    manifests = render(load_example(MIG)).manifests
    pod = pod_of(manifests, "StatefulSet", "phi-mini")
    assert (
        server({"spec": {"template": {"spec": pod}}})["resources"]["limits"][
            "nvidia.com/mig-1g.20gb"
        ]
        == "1"
    )
    # GFD under mixed: nvidia.com/mig-<profile>.product = <model>-MIG-<profile>; the
    # nvidia.com/gpu.product of a MIG-enabled GPU is the bare model, so the example's old
    # selector matched no node.
    assert pod["nodeSelector"] == {
        "nvidia.com/mig-1g.20gb.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.20gb"
    }
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


def test_mig_single_requests_whole_gpus_and_selects_the_suffixed_product() -> None:
    service = edit(load_example(MIG), gpu={"migStrategy": "single"})
    pod = pod_of(render(service).manifests, "StatefulSet", "phi-mini")
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    assert not any(k.startswith("nvidia.com/mig-") for k in limits)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-1g.20gb"}
    quota = find(render(service).manifests, "ResourceQuota")
    assert "requests.nvidia.com/gpu" in quota["spec"]["hard"]


def test_the_old_contradictory_mig_spec_is_refused() -> None:
    text = MIG.read_text().replace(
        "    migProfile: 1g.20gb\n    migStrategy: mixed\n    product: NVIDIA-A100-SXM4-80GB\n",
        "    resource: nvidia.com/mig-1g.20gb\n    product: NVIDIA-A100-SXM4-80GB-MIG-1g.20gb\n",
    )
    assert "resource: nvidia.com/mig-1g.20gb" in text
    with pytest.raises(InvalidInput, match="suffix the renderer adds"):
        load_model_service(text)


@pytest.mark.parametrize(
    ("gpu", "message"),
    [
        ({"resource": "nvidia.com/mig-1g.20gb", "migStrategy": "single"}, "mixed MIG strategy"),
        ({"resource": "nvidia.com/mig-1g.20gb", "migProfile": "2g.20gb"}, "names profile"),
        ({"migProfile": None, "migStrategy": "mixed"}, "needs gpu.migProfile"),
        ({"migStrategy": "single", "product": None}, "only nvidia.com/gpu.product"),
        ({"migStrategy": "none"}, "need a strategy"),
    ],
)
def test_contradictory_mig_specs_are_refused(gpu: dict[str, Any], message: str) -> None:
    assert message in refused(load_example(MIG), gpu=gpu)


def test_mig_with_the_resource_alone_defaults_to_mixed() -> None:
    service = edit(
        load_example(MIG),
        gpu={"migProfile": None, "migStrategy": None, "resource": "nvidia.com/mig-1g.10gb"},
    )
    pod = pod_of(render(service).manifests, "StatefulSet", "phi-mini")
    assert list(pod["nodeSelector"]) == ["nvidia.com/mig-1g.10gb.product"]


# -- 2. provider-aware placement ------------------------------------------------------


def _gpu_service(provider: str, gpu: dict[str, Any]) -> ModelService:
    return edit(
        load_example(LLM),
        capacity={"provider": provider, "serving": "on-demand"},
        gpu={"count": 1, **gpu},
        batch=[],
    )


@pytest.mark.parametrize(
    ("provider", "gpu", "selector", "exists"),
    [
        ("gke", {"product": "nvidia-l4"}, {"cloud.google.com/gke-accelerator": "nvidia-l4"}, []),
        ("gke", {"product": None}, {}, ["cloud.google.com/gke-accelerator"]),
        (
            "gke",
            {"product": "nvidia-a100-80gb", "migProfile": "1g.10gb"},
            {
                "cloud.google.com/gke-accelerator": "nvidia-a100-80gb",
                "cloud.google.com/gke-gpu-partition-size": "1g.10gb",
            },
            [],
        ),
        ("karpenter", {"product": "a100"}, {"karpenter.k8s.aws/instance-gpu-name": "a100"}, []),
        (
            "karpenter",
            {"product": None},
            {"karpenter.k8s.aws/instance-gpu-manufacturer": "nvidia"},
            [],
        ),
        (
            "eks",
            {"product": "p4d.24xlarge"},
            {"node.kubernetes.io/instance-type": "p4d.24xlarge"},
            [],
        ),
        ("aks", {"product": None}, {"kubernetes.azure.com/accelerator": "nvidia"}, []),
        (
            "aks",
            {"product": "Standard_NC24ads_A100_v4"},
            {
                "kubernetes.azure.com/accelerator": "nvidia",
                "node.kubernetes.io/instance-type": "Standard_NC24ads_A100_v4",
            },
            [],
        ),
        ("generic", {"product": None}, {"nvidia.com/gpu.present": "true"}, []),
        ("generic", {"product": "NVIDIA-L4"}, {"nvidia.com/gpu.product": "NVIDIA-L4"}, []),
        (
            "gke",
            {"product": "NVIDIA-L4", "nodeLabels": "gfd"},
            {"nvidia.com/gpu.product": "NVIDIA-L4"},
            [],
        ),
    ],
)
def test_each_provider_selects_the_labels_it_writes(
    provider: str, gpu: dict[str, Any], selector: dict[str, str], exists: list[str]
) -> None:
    manifests = render(_gpu_service(provider, gpu)).manifests
    for kind, name in (("Deployment", "llama"), ("Deployment", "llama-headroom")):
        pod = pod_of(manifests, kind, name)
        assert pod.get("nodeSelector", {}) == selector, (kind, name)
        required = (
            pod.get("affinity", {})
            .get("nodeAffinity", {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
        )
        keys = [
            e["key"]
            for term in required.get("nodeSelectorTerms", [])
            for e in term["matchExpressions"]
        ]
        assert keys == exists
    if provider in ("gke", "eks", "karpenter", "aks") and gpu.get("nodeLabels") != "gfd":
        # Managed nodes carry no GPU feature discovery labels unless the GPU Operator runs.
        pod = pod_of(manifests, "Deployment", "llama")
        assert not any(k.startswith("nvidia.com/") for k in pod.get("nodeSelector", {}))


def test_gke_time_sharing_uses_gkes_sharing_label() -> None:
    pod = pod_of(render(load_example(SPOT)).manifests, "Deployment", "embedder")
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
    }


def test_gfd_time_slicing_selects_the_shared_product_and_strategy() -> None:
    service = _gpu_service("generic", {"product": "Tesla-T4", "timeSlicing": True})
    pod = pod_of(render(service).manifests, "Deployment", "llama")
    assert pod["nodeSelector"] == {
        "nvidia.com/gpu.product": "Tesla-T4-SHARED",
        "nvidia.com/gpu.sharing-strategy": "time-slicing",
    }
    renamed = _gpu_service(
        "generic", {"product": "Tesla-T4", "timeSlicing": True, "resource": "nvidia.com/gpu.shared"}
    )
    pod = pod_of(render(renamed).manifests, "Deployment", "llama")
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "Tesla-T4"  # renamed: no suffix


def test_aks_tolerates_its_documented_sku_taint() -> None:
    pod = pod_of(render(_gpu_service("aks", {"product": None})).manifests, "Deployment", "llama")
    assert {"key": "sku", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"} in pod[
        "tolerations"
    ]


@pytest.mark.parametrize(
    ("provider", "gpu", "message"),
    [
        ("gke", {"product": "NVIDIA-A100-SXM4-80GB"}, "GKE accelerator type"),
        ("karpenter", {"product": "NVIDIA-A100-SXM4-80GB"}, "Karpenter GPU name"),
        ("generic", {"product": "nvidia-l4"}, "GFD product"),
        ("eks", {"product": None}, "no GPU label by default"),
        ("karpenter", {"migProfile": "1g.10gb"}, "gpu.nodeLabels: gfd"),
        ("gke", {"migProfile": "1g.10gb", "migStrategy": "mixed"}, "GKE's device plugin"),
        ("aks", {"product": None, "timeSlicing": True}, "does not time-slice"),
        ("generic", {"nodeLabels": "provider"}, "no provider labels"),
    ],
)
def test_labels_no_node_of_the_provider_carries_are_refused(
    provider: str, gpu: dict[str, Any], message: str
) -> None:
    assert message in refused(
        load_example(LLM),
        capacity={"provider": provider, "serving": "on-demand"},
        gpu=gpu,
        batch=[],
    )


# -- 3. one endpoint picker per pool --------------------------------------------------


def test_each_inference_pool_has_its_own_endpoint_picker() -> None:
    service = load_example(LLM)
    pools = [m for m in render(service).manifests if m["kind"] == "InferencePool"]
    pickers = {p["metadata"]["name"]: p["spec"]["endpointPickerRef"]["name"] for p in pools}
    assert pickers == {"llama": "llama-epp", "llama-canary": "llama-canary-epp"}
    defaulted = edit(service, inferencePool={"endpointPicker": None, "canaryEndpointPicker": None})
    pools = [m for m in render(defaulted).manifests if m["kind"] == "InferencePool"]
    names = [p["spec"]["endpointPickerRef"]["name"] for p in pools]
    assert len(set(names)) == len(names) == 2
    assert "one pool" in refused(
        service, inferencePool={"endpointPicker": "epp", "canaryEndpointPicker": "epp"}
    )


# -- 4. scale to zero that wakes ------------------------------------------------------


def test_activation_value_is_the_activation_threshold() -> None:
    service = edit(
        load_example(SPOT),
        autoscaling={"activation": {"query": "sum(rate(x[1m]))", "threshold": "5"}},
    )
    scaled = find(render(service).manifests, "ScaledObject")
    wake = next(t for t in scaled["spec"]["triggers"] if t["name"] == "activation")
    assert wake["metadata"]["activationThreshold"] == "5"
    assert wake["metadata"]["threshold"] != "5"  # not the 1..N scaling target
    with_target = edit(
        service, autoscaling={"activation": {"query": "q", "threshold": "5", "target": "40"}}
    )
    wake = find(render(with_target).manifests, "ScaledObject")["spec"]["triggers"][1]
    assert (wake["metadata"]["threshold"], wake["metadata"]["activationThreshold"]) == ("40", "5")


def test_spot_example_wakes_on_a_counter_that_moves_without_endpoints() -> None:
    scaled = find(render(load_example(SPOT)).manifests, "ScaledObject")
    wake = next(t for t in scaled["spec"]["triggers"] if t["name"] == "activation")
    query = wake["metadata"]["query"]
    # Envoy counts requests to a cluster with no healthy hosts in upstream_cx_none_healthy,
    # never in upstream_rq_total (envoyproxy.io cluster_manager statistics).
    assert "envoy_cluster_upstream_cx_none_healthy" in query
    assert scaled["spec"]["minReplicaCount"] == 0


# -- 5. credentials for the fetch -----------------------------------------------------


def test_secret_reaches_the_fetch_only() -> None:
    manifests = render(load_example(LLM)).manifests
    for workload, template in pod_templates(manifests):
        pod = template["spec"]
        for init in pod.get("initContainers", []):
            if init["name"] == "fetch":
                assert init["env"] == [
                    {
                        "name": "HF_TOKEN",
                        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
                    }
                ], workload["metadata"]["name"]
        for container in pod["containers"]:
            assert "HF_TOKEN" not in {e["name"] for e in container.get("env", [])}
            assert "envFrom" not in container
    mig = pod_of(render(load_example(MIG)).manifests, "StatefulSet", "phi-mini")
    fetch = next(i for i in mig["initContainers"] if i["name"] == "fetch")
    assert fetch["envFrom"] == [{"secretRef": {"name": "models-s3"}}]


def test_workload_identity_annotates_the_service_account() -> None:
    service = edit(
        load_example(LLM),
        credentials={
            "awsRoleArn": "arn:aws:iam::123456789012:role/models-read",
            "gcpServiceAccount": "models-read@proj-1.iam.gserviceaccount.com",
            "azureClientId": "6c5a2f64-0d6c-4f2a-9b8e-1f7f3c2d9a10",
        },
    )
    manifests = render(service).manifests
    account = find(manifests, "ServiceAccount")
    assert account["metadata"]["annotations"] == {
        "azure.workload.identity/client-id": "6c5a2f64-0d6c-4f2a-9b8e-1f7f3c2d9a10",
        "eks.amazonaws.com/role-arn": "arn:aws:iam::123456789012:role/models-read",
        "iam.gke.io/gcp-service-account": "models-read@proj-1.iam.gserviceaccount.com",
    }
    for _, template in pod_templates(manifests):
        if "fetch" in {i["name"] for i in template["spec"].get("initContainers", [])}:
            assert template["metadata"]["labels"]["azure.workload.identity/use"] == "true"
            assert template["spec"]["serviceAccountName"] == "llama"
    assert "podserve fetch reads only" in refused(
        load_example(LLM), credentials={"env": {"PASSWORD": {"secret": "s", "key": "k"}}}
    )


def test_cloud_storage_credentials_reach_the_fetch_only() -> None:
    azure_env = {
        name: {"secret": "blob", "key": name.lower()}
        for name in ("AZURE_STORAGE_CONNECTION_STRING", "AZURE_STORAGE_SAS_TOKEN")
    }
    service = edit(
        load_example(LLM),
        credentials={"env": azure_env, "gcpKeySecret": {"secret": "gcp", "key": "sa.json"}},
    )
    manifests = render(service).manifests
    fetching = 0
    for workload, template in pod_templates(manifests):
        pod = template["spec"]
        name = workload["metadata"]["name"]
        fetch = next((i for i in pod.get("initContainers", []) if i["name"] == "fetch"), None)
        if fetch is None:
            continue
        fetching += 1
        env = {e["name"]: e for e in fetch["env"]}
        assert set(azure_env) <= set(env), name
        key_path = env["GOOGLE_APPLICATION_CREDENTIALS"]["value"]
        mount = next(m for m in fetch["volumeMounts"] if m["name"] == "gcp-key")
        assert mount["readOnly"], name
        assert key_path == f"{mount['mountPath']}/key.json", name
        volume = next(v for v in pod["volumes"] if v["name"] == "gcp-key")
        assert volume["secret"] == {
            "secretName": "gcp",
            "items": [{"key": "sa.json", "path": "key.json"}],
        }, name
        for container in pod["containers"]:  # the server never sees them
            assert "gcp-key" not in {m["name"] for m in container.get("volumeMounts", [])}
            names = {e["name"] for e in container.get("env", [])}
            assert not names & {*azure_env, "GOOGLE_APPLICATION_CREDENTIALS"}, name
    assert fetching >= 3  # serving, canary, batch (and pre-pull on a host cache)


# -- 6. GKE spot notice ---------------------------------------------------------------


def test_gke_spot_gives_ordinary_pods_fifteen_seconds() -> None:
    assert spot_notice_for_label("cloud.google.com/gke-spot", "true") == 15
    assert spot_notice_for_label("cloud.google.com/gke-preemptible", "true") == 15
    # The spot example as it was (preStop 5 + longest 10 + margin 5 = 20 s).
    old = edit(
        load_example(SPOT),
        serving={"longestRequestSeconds": 10},
        timing={"preStopSeconds": 5, "marginSeconds": 5},
    )
    rendering = render(old)
    assert any("15s reclaim notice" in w for w in rendering.warnings)
    documents = parse_documents(dump_all(rendering.manifests), "<old spot example>")
    found = {f.rule_id for f in lint_documents(documents, ALL_RULES).findings}
    assert "spot-grace-exceeds-notice" in found
    pod = pod_of(render(load_example(SPOT)).manifests, "Deployment", "embedder")
    assert pod["terminationGracePeriodSeconds"] <= 15


# -- 7. PDB at scale ------------------------------------------------------------------


def test_pdb_holds_at_scale_and_allows_one_eviction_at_a_time() -> None:
    manifests = render(load_example(LLM)).manifests  # replicas 2..8
    budget = find(manifests, "PodDisruptionBudget", "llama")["spec"]
    assert budget["maxUnavailable"] == 1
    assert "minAvailable" not in budget
    # The one-replica canary: a drain may take it (documented stance, docs/kubernetes.md).
    assert find(manifests, "PodDisruptionBudget", "llama-canary")["spec"]["maxUnavailable"] == 1
    percent = edit(load_example(LLM), disruption={"maxUnavailable": "25%"})
    spec = find(render(percent).manifests, "PodDisruptionBudget", "llama")["spec"]
    assert spec["maxUnavailable"] == "25%"
    assert "1%..100%" in refused(load_example(LLM), disruption={"maxUnavailable": "0%"})


# -- 8. hostPath cache ----------------------------------------------------------------


def test_every_pod_mounting_the_host_cache_owns_it_first_and_the_server_reads_only() -> None:
    for example, pods in ((LLM, 4), (DEV, 1)):  # llama, canary, batch, prepull; dev-chat
        service = load_example(example)
        manifests = render(service).manifests
        seen = 0
        for workload, template in pod_templates(manifests):
            pod = template["spec"]
            host = [v for v in pod.get("volumes", []) if "hostPath" in v and v["name"] == "cache"]
            if not host:
                continue
            seen += 1
            name = workload["metadata"]["name"]
            path = host[0]["hostPath"]["path"]
            assert path == f"/var/cache/podserve/{service.metadata.namespace}", name
            owner, fetch = pod["initContainers"][:2]
            assert owner["name"] == "cache-owner", name
            assert owner["command"] == ["chown", "10001:10001", "/cache"]
            assert owner["securityContext"]["capabilities"] == {
                "drop": ["ALL"],
                "add": ["CHOWN"],
            }
            assert fetch["name"] == "fetch"
            assert "--verify-hit" in fetch["args"]
            assert "--cache-max-bytes" in fetch["args"]
            if workload["kind"] in ("Deployment", "StatefulSet") and "server" in {
                ctr["name"] for ctr in pod["containers"]
            }:
                mount = next(m for m in server(workload)["volumeMounts"] if m["name"] == "cache")
                assert mount["readOnly"] is True, name
        assert seen == pods, example.name


def test_rendered_fetch_arguments_are_ones_podserve_fetch_accepts() -> None:
    parser = argparse.ArgumentParser()
    fetch_cli.register(parser.add_subparsers())
    for example in EXAMPLES:
        for _, template in pod_templates(render(load_example(example)).manifests):
            for init in template["spec"].get("initContainers", []):
                if init["name"] == "fetch":
                    args = parser.parse_args(init["args"])
                    assert args.cache_max_bytes is not None
                    assert args.cache_max_bytes > 0


def test_cache_cap_defaults_and_is_checked_against_the_model() -> None:
    dev = find(render(load_example(DEV)).manifests, "Deployment", "dev-chat")
    fetch = dev["spec"]["template"]["spec"]["initContainers"][1]
    assert fetch["args"][fetch["args"].index("--cache-max-bytes") + 1] == str(20 * 2**30)
    assert "below model.sizeGi" in refused(load_example(LLM), cache={"maxSize": "8Gi"})


# -- 9. spread ------------------------------------------------------------------------


def test_required_spread_with_template_hash_once_two_replicas_are_kept() -> None:
    llm = pod_of(render(load_example(LLM)).manifests, "Deployment", "llama")  # min 2
    for constraint in llm["topologySpreadConstraints"]:
        assert constraint["whenUnsatisfiable"] == "DoNotSchedule"
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]
    sts = pod_of(render(load_example(MIG)).manifests, "StatefulSet", "phi-mini")
    assert sts["topologySpreadConstraints"][0]["matchLabelKeys"] == ["controller-revision-hash"]
    canary = pod_of(render(load_example(LLM)).manifests, "Deployment", "llama-canary")  # 1
    assert {t["whenUnsatisfiable"] for t in canary["topologySpreadConstraints"]} == {
        "ScheduleAnyway"
    }
    opted_out = edit(load_example(LLM), spread={"hard": False})
    pod = pod_of(render(opted_out).manifests, "Deployment", "llama")
    for constraint in pod["topologySpreadConstraints"]:
        assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
        assert "matchLabelKeys" not in constraint


# -- 10. KEDA: scale-up window and fallback -------------------------------------------


def test_gpu_scale_up_waits_out_a_spike_and_a_broken_pipeline_does_not_pin_min() -> None:
    scaled = find(render(load_example(LLM)).manifests, "ScaledObject", "llama")
    up = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
    assert up["stabilizationWindowSeconds"] == 60
    assert scaled["spec"]["fallback"] == {
        "failureThreshold": 3,
        "replicas": 3,  # min 2 + 1
        "behavior": "currentReplicasIfHigher",
    }
    cpu = find(render(load_example(CPU)).manifests, "HorizontalPodAutoscaler")
    assert cpu["spec"]["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    chosen = edit(load_example(LLM), autoscaling={"fallbackReplicas": 6})
    assert (
        find(render(chosen).manifests, "ScaledObject", "llama")["spec"]["fallback"]["replicas"] == 6
    )
    assert "cpu triggers" in refused(
        load_example(LLM),
        autoscaling={"metric": "cpu", "forceCpu": True, "target": "70", "fallbackReplicas": 2},
    )
    assert "below the scale-down" in refused(
        load_example(LLM),
        autoscaling={"scaleUpStabilizationSeconds": 900, "scaleDownStabilizationSeconds": 600},
    )


# -- 11. auxiliary pods: NetworkPolicy, probes, checkov -------------------------------


def _selected(policy: Manifest, labels: dict[str, str]) -> bool:
    wanted = policy["spec"]["podSelector"].get("matchLabels", {})
    return all(labels.get(k) == v for k, v in wanted.items())


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_pod_is_selected_by_a_network_policy(example: Any) -> None:
    manifests = render(load_example(example)).manifests
    policies = [m for m in manifests if m["kind"] == "NetworkPolicy"]
    for workload, template in pod_templates(manifests):
        if workload["kind"] in ("Job", "CronJob"):
            continue  # batch and eval runs connect out; ingress to them is never opened
        labels = template["metadata"]["labels"]
        assert any(_selected(p, labels) for p in policies), workload["metadata"]["name"]


def test_headroom_pods_are_cut_off_and_prepull_only_reaches_out() -> None:
    manifests = render(load_example(LLM)).manifests
    headroom = find(manifests, "NetworkPolicy", "llama-headroom")["spec"]
    assert headroom["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in headroom
    assert "egress" not in headroom
    prepull = find(manifests, "NetworkPolicy", "llama-prepull")["spec"]
    assert prepull["policyTypes"] == ["Ingress"]
    assert "ingress" not in prepull


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_auxiliary_pods_tolerate_what_the_serving_pods_tolerate(example: Any) -> None:
    """Pre-pull and headroom pods exist to warm or hold the serving pods' nodes: on spot
    serving they need the spot taint's toleration too (found by `podserve simulate`: a GKE
    spot headroom pod stayed Pending on the untolerated `cloud.google.com/gke-spot` taint)."""
    manifests = render(load_example(example)).manifests
    pods = [(m["metadata"]["name"], t["spec"]) for m, t in pod_templates(manifests)]
    serving = [pod for _, pod in pods if any(c["name"] == "server" for c in pod["containers"])]
    assert serving
    wanted = {(t["key"], t.get("value")) for t in serving[0].get("tolerations", [])}
    for name, pod in pods:
        if name.endswith(("-headroom", "-prepull")):
            have = {(t["key"], t.get("value")) for t in pod.get("tolerations", [])}
            assert wanted <= have, f"{name} lacks {wanted - have}"


def test_spot_headroom_tolerates_the_spot_taint() -> None:
    service = edit(load_example(SPOT), coldStart={"headroomPods": 1})
    pod = find(render(service).manifests, "Deployment", f"{service.metadata.name}-headroom")
    tolerations = pod["spec"]["template"]["spec"]["tolerations"]
    assert {
        "key": "cloud.google.com/gke-spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in tolerations


_SKIP = re.compile(r"^(CKV2?_K8S_[0-9]+)=(.{20,})$")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_checkov_skips_carry_reasons_and_what_checkov_checks_holds(example: Any) -> None:
    """What checkov 3.3.30 reported on these examples (docs/kubernetes.md, "checkov"),
    kept true without it: images pinned by digest (CKV_K8S_43), probes unless skipped
    with a reason (CKV_K8S_8/9), and every skip annotation naming a check and a reason."""
    for m in render(load_example(example)).manifests:
        annotations = m["metadata"].get("annotations", {})
        skips = {}
        for key, value in annotations.items():
            if key.startswith("checkov.io/skip"):
                match = _SKIP.match(value)
                assert match, f"{m['metadata']['name']}: {key}={value!r} has no reason"
                skips[match[1]] = match[2]
        if m["kind"] not in WORKLOADS:
            continue
        template = (
            m["spec"]["jobTemplate"]["spec"]["template"]
            if m["kind"] == "CronJob"
            else m["spec"]["template"]
        )
        pod = template["spec"]
        for ctr in pod["containers"] + pod.get("initContainers", []):
            assert "@sha256:" in ctr["image"], ctr["name"]
        if m["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
            for ctr in pod["containers"]:
                if "livenessProbe" not in ctr:
                    assert "CKV_K8S_8" in skips, m["metadata"]["name"]
                if "readinessProbe" not in ctr:
                    assert "CKV_K8S_9" in skips, m["metadata"]["name"]
        added = [
            ctr
            for ctr in pod.get("initContainers", []) + pod["containers"]
            if ctr.get("securityContext", {}).get("capabilities", {}).get("add")
        ]
        if added:
            assert "CKV_K8S_25" in skips, m["metadata"]["name"]


# -- 12. batch deadline, serving priority ---------------------------------------------


def test_batch_runs_have_a_deadline_and_serving_outranks_everything_else() -> None:
    manifests = render(load_example(LLM)).manifests
    cron = find(manifests, "CronJob", "llama-nightly-eval")
    assert cron["spec"]["jobTemplate"]["spec"]["activeDeadlineSeconds"] == 21600
    serving = find(manifests, "PriorityClass", "llm-llama-serving")
    headroom = find(manifests, "PriorityClass", "llm-llama-headroom")
    assert serving["value"] > 0 > headroom["value"]
    for name in ("llama", "llama-canary"):
        pod = pod_of(manifests, "Deployment", name)
        assert pod["priorityClassName"] == "llm-llama-serving"
    batch_pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert "priorityClassName" not in batch_pod  # batch stays at 0, below serving
    given = edit(load_example(LLM), priorityClassName="platform-serving")
    rendered = render(given).manifests
    assert pod_of(rendered, "Deployment", "llama")["priorityClassName"] == "platform-serving"
    assert [m["metadata"]["name"] for m in rendered if m["kind"] == "PriorityClass"] == [
        "llm-llama-headroom"
    ]


# -- 13. active hours -----------------------------------------------------------------


def test_active_hours_render_a_cron_trigger_beside_the_queue_trigger() -> None:
    service = load_example(DEV)
    scaled = find(render(service).manifests, "ScaledObject")
    assert scaled["spec"]["minReplicaCount"] == 0
    triggers = {t["type"]: t for t in scaled["spec"]["triggers"]}
    assert triggers["prometheus"]["metadata"]["query"].startswith("sum(podserve_queue_depth{")
    assert triggers["cron"]["metadata"] == {
        "timezone": "Europe/Berlin",
        "start": "0 7 * * 1-5",
        "end": "0 19 * * 1-5",
        "desiredReplicas": "1",
    }
    assert "engine keda" in refused(service, autoscaling={"engine": "hpa", "metric": "queue-depth"})
    assert "at least 1" in refused(
        service,
        replicas={"min": 0, "max": 2},
        autoscaling={"scaleToZero": True, "activation": {"query": "q"}},
    )
    assert "timezone" in refused(
        service,
        autoscaling={"activeHours": [{"start": "0 7 * * *", "end": "0 19 * * *", "timezone": "x"}]},
    )


def test_every_example_keeps_the_serving_user_and_digest_pins() -> None:
    for example in EXAMPLES:
        service = load_example(example)
        for workload, template in pod_templates(render(service).manifests):
            for ctr in template["spec"]["containers"]:
                ctx = ctr.get("securityContext", {})
                assert ctx.get("runAsUser", c.USER_ID) == c.USER_ID, workload["metadata"]["name"]


def test_kubernetes_guide_has_a_section_per_provider_and_the_cold_start_warning() -> None:
    guide = (REPO_ROOT / "docs" / "kubernetes.md").read_text()
    for heading in ("#### GKE", "#### EKS", "#### AKS", "#### NVIDIA GPU Operator"):
        assert heading in guide
    for label in (
        "cloud.google.com/gke-accelerator",
        "karpenter.k8s.aws/instance-gpu-name",
        "kubernetes.azure.com/accelerator",
        "nvidia.com/mig-<profile>.product",
    ):
        assert label in guide
    assert "Requests that arrive during a cold start fail" in guide
    assert "Keep `replicas.min: 1` for\ninteractive paths" in guide


def test_grpc_is_offered_per_pod_not_through_kube_proxy() -> None:
    manifests = render(load_example(LLM)).manifests
    main = find(manifests, "Service", "llama")["spec"]
    assert [p["name"] for p in main["ports"]] == ["http"]
    grpc = find(manifests, "Service", "llama-grpc")["spec"]
    assert grpc["clusterIP"] == "None"
    assert grpc["ports"][0]["port"] == c.GRPC_PORT
    assert grpc["ports"][0]["appProtocol"] == "kubernetes.io/h2c"


def test_credentials_that_leave_no_trace_are_declared_to_lint() -> None:
    dev = find(render(load_example(DEV)).manifests, "Deployment", "dev-chat")
    annotations = dev["metadata"]["annotations"]
    assert annotations[c.LINT_IGNORE] == "fetch-without-credentials"
    assert "model.public" in annotations[c.LINT_IGNORE_REASON]
    pod_identity = edit(load_example(CPU), credentials={"eksPodIdentity": True})
    deployment = find(render(pod_identity).manifests, "Deployment", "fraud-score")
    assert "EKS Pod Identity" in deployment["metadata"]["annotations"][c.LINT_IGNORE_REASON]
    # Gated: nothing is silenced.
    llama = find(render(load_example(LLM)).manifests, "Deployment", "llama")
    assert c.LINT_IGNORE not in llama["metadata"].get("annotations", {})
