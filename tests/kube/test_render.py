"""What `podserve render` computes: each number follows from the spec, never hard-coded."""

from __future__ import annotations

import math
from typing import Any

import pytest

from podserve.config.model_service import ModelService
from podserve.kube import conventions as c
from podserve.kube.order import APPLY_ORDER
from podserve.kube.render import render
from tests.kube.helpers import env, find, kinds, server, with_spec
from tests.kube.paths import EXAMPLES, load_example

LLM = next(p for p in EXAMPLES if p.name == "llm-gpu-keda-canary.yaml")
CPU = next(p for p in EXAMPLES if p.name == "sklearn-cpu-hpa.yaml")
MIG = next(p for p in EXAMPLES if p.name == "mig-statefulset.yaml")
SPOT = next(p for p in EXAMPLES if p.name == "spot-scale-to-zero.yaml")


@pytest.fixture(scope="module")
def llm() -> ModelService:
    return load_example(LLM)


def test_objects_come_in_apply_order() -> None:
    for path in EXAMPLES:
        order = [APPLY_ORDER.index(k) for k in kinds(render(load_example(path)).manifests)]
        assert order == sorted(order), path.name


def test_llm_example_renders_every_requested_object(llm: ModelService) -> None:
    manifests = render(llm).manifests
    assert set(kinds(manifests)) == {
        "PriorityClass",
        "ResourceQuota",
        "LimitRange",
        "ServiceAccount",
        "ConfigMap",
        "NetworkPolicy",
        "Service",
        "DaemonSet",
        "Deployment",
        "CronJob",
        "PodDisruptionBudget",
        "ScaledObject",
        "PodMonitor",
        "PrometheusRule",
        "InferencePool",
        "HTTPRoute",
    }
    assert "HorizontalPodAutoscaler" not in kinds(manifests)  # KEDA owns the HPA


def test_three_probes_on_three_endpoints_with_a_computed_startup_budget(
    llm: ModelService,
) -> None:
    container = server(find(render(llm).manifests, "Deployment", "llama"))
    startup, live, ready = (
        container[k] for k in ("startupProbe", "livenessProbe", "readinessProbe")
    )
    assert [p["httpGet"]["path"] for p in (startup, live, ready)] == [
        "/startup",
        "/healthz",
        "/ready",
    ]
    assert startup["periodSeconds"] == 10
    assert startup["failureThreshold"] == math.ceil(240 * 1.5 / 10)  # loadSeconds 240
    assert (live["periodSeconds"], live["failureThreshold"]) == (20, 3)
    assert (ready["periodSeconds"], ready["failureThreshold"]) == (5, 2)
    canary = server(find(render(llm).manifests, "Deployment", "llama-canary"))
    assert canary["startupProbe"]["failureThreshold"] == math.ceil(260 * 1.5 / 10)


def test_grace_period_and_drain_timeout_come_from_the_same_numbers(llm: ModelService) -> None:
    pod = find(render(llm).manifests, "Deployment", "llama")["spec"]["template"]["spec"]
    container = server(find(render(llm).manifests, "Deployment", "llama"))
    pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    drain = int(env(container)["PODSERVE_DRAIN_TIMEOUT_S"])
    assert pre_stop == llm.spec.timing.pre_stop_seconds
    assert drain == math.ceil(llm.spec.serving.longest_request_seconds)
    assert pod["terminationGracePeriodSeconds"] == pre_stop + drain + llm.spec.timing.margin_seconds
    longer = with_spec(
        llm, serving={**llm.to_document()["spec"]["serving"], "longestRequestSeconds": 300}
    )
    pod2 = find(render(longer).manifests, "Deployment", "llama")["spec"]["template"]["spec"]
    assert pod2["terminationGracePeriodSeconds"] == pre_stop + 300 + llm.spec.timing.margin_seconds


def test_resources_gpu_equal_memory_equal_with_shm_cpu_limit_above(llm: ModelService) -> None:
    res = server(find(render(llm).manifests, "Deployment", "llama"))["resources"]
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "1"
    # memory 48Gi + shm 8Gi: /dev/shm is charged to the same limit
    assert res["requests"]["memory"] == res["limits"]["memory"] == "56Gi"
    assert res["requests"]["cpu"] == "8"
    assert res["limits"]["cpu"] == "16"
    pod = find(render(llm).manifests, "Deployment", "llama")["spec"]["template"]["spec"]
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}


def test_placement_tolerates_the_taint_and_selects_a_real_label(llm: ModelService) -> None:
    pod = find(render(llm).manifests, "Deployment", "llama")["spec"]["template"]["spec"]
    assert pod["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    # Karpenter's own label (the example runs on EKS with Karpenter, no GPU Operator)
    assert pod["nodeSelector"] == {"karpenter.k8s.aws/instance-gpu-name": "a100"}
    keys = [t["topologyKey"] for t in pod["topologySpreadConstraints"]]
    assert keys == [c.HOSTNAME_KEY, c.ZONE_KEY]
    # serving prefers on-demand capacity
    pref = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert pref[0]["preference"]["matchExpressions"][0] == {
        "key": "karpenter.sh/capacity-type",
        "operator": "NotIn",
        "values": ["spot"],
    }


def test_pod_is_hardened_and_fetches_the_pinned_model(llm: ModelService) -> None:
    pod = find(render(llm).manifests, "Deployment", "llama")["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["runAsUser"] == c.USER_ID
    owner, fetch = pod["initContainers"]
    assert owner["command"] == ["chown", "10001:10001", "/cache"]
    assert fetch["args"] == [
        "fetch",
        llm.spec.model.uri,
        "--digest",
        llm.spec.model.digest,
        "--cache-dir",
        "/cache",
        "--cache-max-bytes",
        str(100 * 2**30),
        "--verify-hit",
    ]
    for container in (fetch, server(find(render(llm).manifests, "Deployment", "llama"))):
        ctx = container["securityContext"]
        assert ctx["readOnlyRootFilesystem"] is True
        assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert env(server(find(render(llm).manifests, "Deployment", "llama")))["PODSERVE_MODELS"] == (
        f"llama-3-8b=/cache/entries/sha256-{llm.spec.model.digest.split(':')[1]}:transformers"
    )


@pytest.mark.parametrize(
    ("rollout", "headroom", "expected"),
    [
        (
            {"spareGpu": True},
            0,
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
        ),
        (
            {"spareGpu": False},
            0,
            {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        ),
        ({}, 0, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
        ({}, 1, {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}),
        ({"strategy": "Recreate"}, 0, {"type": "Recreate"}),
    ],
)
def test_rolling_strategy_follows_gpu_headroom(
    llm: ModelService, rollout: dict[str, Any], headroom: int, expected: dict[str, Any]
) -> None:
    service = with_spec(
        llm, rollout=rollout, coldStart={"prePull": False, "headroomPods": headroom}
    )
    deployment = find(render(service).manifests, "Deployment", "llama")
    assert deployment["spec"]["strategy"] == expected
    assert ("podserve.dev/spare-gpu" in deployment["metadata"].get("annotations", {})) == (
        expected.get("rollingUpdate", {}).get("maxSurge") == 1
    )


def test_cpu_model_always_surges() -> None:
    deployment = find(render(load_example(CPU)).manifests, "Deployment", "fraud-score")
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert "tolerations" not in deployment["spec"]["template"]["spec"]


def test_keda_query_returns_a_total_and_scales_down_slowly(llm: ModelService) -> None:
    scaled = find(render(llm).manifests, "ScaledObject", "llama")
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["metricType"] == "AverageValue"
    assert trigger["metadata"]["query"].startswith("sum(podserve_queue_depth{")
    assert 'track="stable"' in trigger["metadata"]["query"]
    assert trigger["metadata"]["threshold"] == "8"
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 60  # a GPU model
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert scaled["spec"]["minReplicaCount"] == 2
    assert scaled["spec"]["maxReplicaCount"] == 8
    assert "replicas" not in find(render(llm).manifests, "Deployment", "llama")["spec"]


def test_scale_down_window_exceeds_a_long_load(llm: ModelService) -> None:
    slow = llm.to_document()
    slow["spec"]["model"]["loadSeconds"] = 900
    service = ModelService.model_validate(slow)
    scaled = find(render(service).manifests, "ScaledObject", "llama")
    window = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"][
        "stabilizationWindowSeconds"
    ]
    assert window == 1800 > 900


def test_hpa_path_uses_a_pods_metric_and_an_adapter_rule() -> None:
    manifests = render(load_example(CPU)).manifests
    hpa = find(manifests, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "podserve_inflight_requests"},
                "target": {"type": "AverageValue", "averageValue": "16"},
            },
        }
    ]
    assert hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] >= 600
    rules = find(manifests, "ConfigMap", "fraud-score-adapter-rules")["data"]["rules.yaml"]
    assert "podserve_inflight_requests" in rules
    assert "<<.LabelMatchers>>" in rules


def test_ttft_uses_value_for_keda_and_adapter_quantile_for_hpa() -> None:
    scaling = {"engine": "hpa", "metric": "ttft-p95", "target": "2"}
    mig = render(with_spec(load_example(MIG), autoscaling=scaling)).manifests
    hpa = find(mig, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "podserve_ttft_p95_seconds"
    assert (
        "histogram_quantile(0.95"
        in find(mig, "ConfigMap", "phi-mini-adapter-rules")["data"]["rules.yaml"]
    )


def test_forced_cpu_scaling_warns_and_is_marked_for_lint(llm: ModelService) -> None:
    service = with_spec(
        llm, autoscaling={"engine": "hpa", "metric": "cpu", "target": "70", "forceCpu": True}
    )
    rendering = render(service)
    assert any("CPU" in w for w in rendering.warnings)
    hpa = find(rendering.manifests, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["metadata"]["annotations"][c.LINT_IGNORE] == "hpa-cpu-on-gpu"


def test_pdb_leaves_room_for_a_drain(llm: ModelService) -> None:
    manifests = render(llm).manifests
    assert find(manifests, "PodDisruptionBudget", "llama")["spec"]["maxUnavailable"] == 1
    assert find(manifests, "PodDisruptionBudget", "llama-canary")["spec"]["maxUnavailable"] == 1
    mig = find(render(load_example(MIG)).manifests, "PodDisruptionBudget")
    assert mig["spec"] == {
        "maxUnavailable": 1,
        "selector": mig["spec"]["selector"],
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
    }


def test_canary_route_weights_and_backends(llm: ModelService) -> None:
    route = find(render(llm).manifests, "HTTPRoute", "llama")
    refs = route["spec"]["rules"][0]["backendRefs"]
    assert [(r["name"], r["weight"], r["kind"]) for r in refs] == [
        ("llama", 90, "InferencePool"),
        ("llama-canary", 10, "InferencePool"),
    ]
    assert route["spec"]["parentRefs"] == [{"name": "inference-gateway", "namespace": "gateways"}]
    canary = find(render(llm).manifests, "Deployment", "llama-canary")
    assert canary["spec"]["replicas"] == 1
    assert env(server(canary))["PODSERVE_MODELS"].startswith("llama-3-8b=")  # same public name
    pool = find(render(llm).manifests, "InferencePool", "llama-canary")
    assert pool["spec"]["selector"]["matchLabels"][c.TRACK_LABEL] == "canary"


def test_statefulset_with_per_replica_cache_claims() -> None:
    manifests = render(load_example(MIG)).manifests
    sts = find(manifests, "StatefulSet")
    assert sts["spec"]["serviceName"] == "phi-mini-headless"
    assert sts["spec"]["volumeClaimTemplates"][0]["spec"]["resources"]["requests"] == {
        "storage": "20Gi"
    }
    assert find(manifests, "Service", "phi-mini-headless")["spec"]["clusterIP"] == "None"
    res = server(sts)["resources"]
    assert res["limits"]["nvidia.com/mig-1g.20gb"] == "1"
    assert res["limits"]["memory"] == "18Gi"
    assert res["limits"]["cpu"] == "3"


def test_spot_serving_fits_the_reclaim_notice_and_scales_from_zero() -> None:
    service = load_example(SPOT)
    rendering = render(service)
    assert rendering.warnings == ()
    pod = find(rendering.manifests, "Deployment")["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] <= 15
    assert {
        "key": "cloud.google.com/gke-spot",
        "operator": "Equal",
        "value": "true",
        "effect": "NoSchedule",
    } in pod["tolerations"]
    assert pod["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-tesla-t4",
        "cloud.google.com/gke-gpu-sharing-strategy": "time-sharing",
    }
    scaled = find(rendering.manifests, "ScaledObject")
    assert scaled["spec"]["minReplicaCount"] == 0
    assert [t["name"] for t in scaled["spec"]["triggers"]] == ["inflight", "activation"]
    slow = service.to_document()
    slow["spec"]["serving"]["longestRequestSeconds"] = 60
    warned = render(ModelService.model_validate(slow)).warnings
    assert any("reclaim notice" in w for w in warned)


def test_batch_job_tolerates_spot_and_ignores_disruptions(llm: ModelService) -> None:
    cron = find(render(llm).manifests, "CronJob", "llama-nightly-eval")
    job = cron["spec"]["jobTemplate"]["spec"]
    assert job["podFailurePolicy"]["rules"][0]["onPodConditions"][0]["type"] == ("DisruptionTarget")
    pod = job["template"]["spec"]
    assert (
        pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0][
            "preference"
        ]["matchExpressions"][0]["operator"]
        == "In"
    )
    assert pod["terminationGracePeriodSeconds"] <= 30
    assert pod["containers"][0]["command"][:2] == ["python", "-m"]


def test_cold_start_objects(llm: ModelService) -> None:
    manifests = render(llm).manifests
    priority = find(manifests, "PriorityClass", "llm-llama-headroom")
    assert priority["value"] < 0
    assert priority["preemptionPolicy"] == "Never"
    headroom = find(manifests, "Deployment", "llama-headroom")
    pod = headroom["spec"]["template"]["spec"]
    assert pod["priorityClassName"] == priority["metadata"]["name"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    daemon = find(manifests, "DaemonSet")
    assert daemon["spec"]["template"]["spec"]["nodeSelector"] == {
        "karpenter.k8s.aws/instance-gpu-name": "a100"
    }
    assert [i["name"] for i in daemon["spec"]["template"]["spec"]["initContainers"]] == [
        "cache-owner",
        "fetch",
    ]


def test_quota_and_monitoring(llm: ModelService) -> None:
    manifests = render(llm).manifests
    assert find(manifests, "ResourceQuota")["spec"]["hard"]["requests.nvidia.com/gpu"] == "12"
    alerts = {r["alert"] for r in find(manifests, "PrometheusRule")["spec"]["groups"][0]["rules"]}
    assert alerts == {
        "PodserveTTFTP99High",
        "PodserveErrorRatioHigh",
        "PodserveReadinessFlapping",
        "PodserveQueueSaturated",
    }
    monitor = find(manifests, "PodMonitor")["spec"]["podMetricsEndpoints"][0]
    assert monitor["port"] == "http"
    assert monitor["path"] == "/metrics"
