"""API-server checks the schema cannot express: every rendered example passes them, and each
check rejects a broken object with the server's own message (pkg/apis/*/validation in
kubernetes/kubernetes, KEDA's webhook, the kubelet's probe port lookup)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from podserve.kube.apiserver import check_manifest, check_manifests, server_problems
from podserve.kube.apiserver.core import is_extended, port_name_errors
from podserve.kube.render import render
from podserve.kube.types import Manifest, Severity
from tests.kube.conftest import CliRunner
from tests.kube.paths import EXAMPLES, load_example

LLM = next(p for p in EXAMPLES if p.stem == "llm-gpu-keda-canary")


def rendered(example: Path = LLM) -> list[Manifest]:
    return list(render(load_example(example)).manifests)


def one(manifests: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    found = [m for m in manifests if m["kind"] == kind and name in (None, m["metadata"]["name"])]
    return copy.deepcopy(found[0])


def server(deployment: Manifest) -> dict[str, Any]:
    containers: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"]
    return containers[0]


def messages(manifest: Manifest) -> list[str]:
    return [p.message for p in check_manifest(manifest)]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_rendered_example_passes_the_server_checks(example: Path) -> None:
    problems = server_problems(rendered(example))
    assert problems == [], [str(p) for p in problems]


def test_gpu_request_must_equal_limit() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    server(deployment)["resources"]["requests"]["nvidia.com/gpu"] = "1"
    server(deployment)["resources"]["limits"]["nvidia.com/gpu"] = "2"
    assert messages(deployment) == [
        'spec.template.spec.containers[0].resources.requests: Invalid value: "1": must be '
        "equal to nvidia.com/gpu limit of 2"
    ]


def test_gpu_request_needs_a_limit() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    del server(deployment)["resources"]["limits"]["nvidia.com/gpu"]
    assert messages(deployment) == [
        "spec.template.spec.containers[0].resources.limits: Required value: Limit must be set "
        "for non overcommitable resources"
    ]


def test_gpu_quantity_must_be_an_integer() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    server(deployment)["resources"]["requests"]["nvidia.com/gpu"] = "0.5"
    server(deployment)["resources"]["limits"]["nvidia.com/gpu"] = "0.5"
    found = messages(deployment)
    assert (
        "spec.template.spec.containers[0].resources.limits[nvidia.com/gpu]: Invalid value: "
        "500m: must be an integer"
    ) in found
    assert len(found) == 2  # the request too
    # CPU and memory are native: fractions and request < limit are fine.
    assert not is_extended("cpu")
    assert not is_extended("example.kubernetes.io/x")
    assert is_extended("nvidia.com/mig-1g.10gb")


def test_selector_must_match_template_labels() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    deployment["spec"]["template"]["metadata"]["labels"]["podserve.dev/track"] = "canary"
    [message] = messages(deployment)
    assert message.startswith("spec.template.metadata.labels: Invalid value: {")
    assert message.endswith(": `selector` does not match template `labels`")


def test_empty_selector_is_invalid() -> None:
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "s", "namespace": "ml"},
        "spec": {"selector": {"matchLabels": {}}, "template": {"metadata": {}, "spec": {}}},
    }
    assert messages(statefulset) == [
        'spec.selector: Invalid value: {"matchLabels":{}}: empty selector is invalid for '
        "statefulset"
    ]


def test_rolling_update_cannot_be_stuck() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    deployment["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": 0, "maxUnavailable": 0}
    assert messages(deployment) == [
        "spec.strategy.rollingUpdate.maxUnavailable: Invalid value: 0: may not be 0 when "
        "`maxSurge` is 0"
    ]
    # An omitted field takes the API default (25%), so maxSurge "0%" alone is fine.
    deployment["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": "0%"}
    assert messages(deployment) == []
    deployment["spec"]["strategy"] = {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}
    assert messages(deployment) == [
        "spec.strategy.rollingUpdate: Forbidden: may not be specified when strategy `type` "
        "is 'Recreate'"
    ]
    daemonset = one(rendered(), "DaemonSet")
    daemonset["spec"]["updateStrategy"]["rollingUpdate"] = {"maxUnavailable": 0}
    assert messages(daemonset) == [
        "spec.updateStrategy.rollingUpdate.maxUnavailable: Required value: cannot be 0 when "
        "maxSurge is 0"
    ]


def test_pdb_takes_one_of_min_available_and_max_unavailable() -> None:
    pdb = one(rendered(), "PodDisruptionBudget", "llama")
    pdb["spec"]["minAvailable"] = 1
    pdb["spec"]["maxUnavailable"] = 1
    [message] = messages(pdb)
    assert message.startswith("spec: Invalid value: {")
    assert message.endswith(": minAvailable and maxUnavailable cannot be both set")


def test_port_names_are_iana_service_names() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    server(deployment)["ports"][0]["name"] = "http-metrics-port"
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        server(deployment)[probe]["httpGet"]["port"] = "http-metrics-port"
    assert messages(deployment) == [
        'spec.template.spec.containers[0].ports[0].name: Invalid value: "http-metrics-port": '
        "must be no more than 15 characters"
    ] + [
        f'spec.template.spec.containers[0].{probe}.httpGet.port: Invalid value: "http-metrics-'
        'port": must be no more than 15 characters'
        for probe in ("startupProbe", "livenessProbe", "readinessProbe")
    ]
    assert port_name_errors("Http") == [
        "must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)"
    ]
    assert port_name_errors("8000") == ["must contain at least one letter (a-z)"]
    assert port_name_errors("-a--b") == [
        "must not contain consecutive hyphens",
        "must not begin or end with a hyphen",
    ]
    server(deployment)["ports"][0]["name"] = "grpc"
    [duplicate] = [m for m in messages(deployment) if "Duplicate" in m]
    assert duplicate == 'spec.template.spec.containers[0].ports[1].name: Duplicate value: "grpc"'


def test_probe_on_an_undeclared_port_is_a_runtime_warning() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    server(deployment)["readinessProbe"]["httpGet"]["port"] = "metrics"
    [problem] = check_manifest(deployment)
    assert problem.severity is Severity.WARNING
    assert problem.path == "spec.template.spec.containers[0].readinessProbe.httpGet.port"
    assert "accepted by the API server" in problem.message
    assert "port metrics not found" in problem.message
    assert problem.source.endswith("pkg/kubelet/prober/prober.go")


def test_hpa_stabilization_window_at_most_an_hour() -> None:
    hpa = one(
        rendered(next(p for p in EXAMPLES if p.stem == "sklearn-cpu-hpa")),
        "HorizontalPodAutoscaler",
    )
    hpa["spec"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"] = 3601
    hpa["spec"]["behavior"]["scaleUp"]["policies"] = [
        {"type": "Pods", "value": 0, "periodSeconds": 1801}
    ]
    assert messages(hpa) == [
        "spec.behavior.scaleUp.policies[0].periodSeconds: Invalid value: 1801: must be less "
        "than or equal to 1800",
        "spec.behavior.scaleUp.policies[0].value: Invalid value: 0: must be greater than zero",
        "spec.behavior.scaleDown.stabilizationWindowSeconds: Invalid value: 3601: must be "
        "less than or equal to 3600",
    ]
    hpa["spec"]["behavior"] = {}
    hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"] = 4, 3
    assert messages(hpa) == [
        "spec.maxReplicas: Invalid value: 3: must be greater than or equal to `minReplicas`"
    ]


def test_keda_webhook_replica_bounds_and_hpa_behavior() -> None:
    scaled = one(rendered(), "ScaledObject", "llama")
    scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"] = 5, 3
    assert messages(scaled) == [
        'admission webhook "vscaledobject.kb.io" denied the request: MinReplicaCount=5 must '
        "be less than MaxReplicaCount=3"
    ]
    scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"] = 1, 3
    scaled["spec"]["idleReplicaCount"] = 1
    assert messages(scaled) == [
        'admission webhook "vscaledobject.kb.io" denied the request: IdleReplicaCount=1 must '
        "be less than MinReplicaCount=1"
    ]
    del scaled["spec"]["idleReplicaCount"]
    behavior = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    behavior["scaleDown"]["stabilizationWindowSeconds"] = 7200
    assert messages(scaled) == [
        "spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown."
        "stabilizationWindowSeconds: Invalid value: 7200: must be less than or equal to 3600"
    ]


def test_every_problem_cites_its_upstream_source() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    deployment["spec"]["strategy"]["rollingUpdate"] = {"maxSurge": 0, "maxUnavailable": 0}
    server(deployment)["resources"]["requests"]["nvidia.com/gpu"] = "2"
    pdb = one(rendered(), "PodDisruptionBudget", "llama")
    pdb["spec"]["minAvailable"] = pdb["spec"]["maxUnavailable"] = 1
    sources = {p.source for p in check_manifests([deployment, pdb])}
    assert sources == {
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/apis/apps/validation/"
        "validation.go",
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/apis/core/validation/"
        "validation.go",
        "https://github.com/kubernetes/kubernetes/blob/master/pkg/apis/policy/validation/"
        "validation.go",
    }


def test_render_refuses_output_the_cluster_would_reject(
    cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No valid spec renders a broken object, so the test corrupts the real rendering once.
    import podserve.kube.render as rendering

    real = rendering.render

    def broken(service: Any) -> Any:
        result = real(service)
        for manifest in result.manifests:
            if manifest["kind"] == "PodDisruptionBudget":
                manifest["spec"]["minAvailable"] = 1
                manifest["spec"]["maxUnavailable"] = 1
        return result

    assert cli("render", str(LLM))[0] == 0
    monkeypatch.setattr(rendering, "render", broken)
    code, out, err = cli("render", str(LLM))
    assert code == 1
    assert out == ""
    assert "minAvailable and maxUnavailable cannot be both set" in err
    assert "the cluster would reject this output" in err


def test_prestop_sleep_within_the_grace_period() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    grace = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    server(deployment)["lifecycle"]["preStop"]["sleep"]["seconds"] = grace + 1
    assert messages(deployment) == [
        f"spec.template.spec.containers[0].lifecycle.preStop.sleep.seconds: Invalid value: "
        f"{grace + 1}: must be non-negative and less than terminationGracePeriodSeconds ({grace})"
    ]
    # Without a grace period the API default of 30 s applies.
    del deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    server(deployment)["lifecycle"]["preStop"]["sleep"]["seconds"] = 31
    assert messages(deployment)[0].endswith("terminationGracePeriodSeconds (30)")


def test_topology_spread_constraints() -> None:
    deployment = one(rendered(), "Deployment", "llama")
    selector = {"matchLabels": {"app.kubernetes.io/name": "llama"}}
    hostname = "kubernetes.io/hostname"
    deployment["spec"]["template"]["spec"]["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": hostname,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector,
            "matchLabelKeys": ["pod-template-hash", "app.kubernetes.io/name"],
        },
        {"maxSkew": 0, "topologyKey": hostname, "whenUnsatisfiable": "ScheduleAnyway",
         "minDomains": 2, "matchLabelKeys": ["pod-template-hash"]},
        {"maxSkew": 1, "topologyKey": hostname, "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": selector},
    ]  # fmt: skip
    at = "spec.template.spec.topologySpreadConstraints"
    assert messages(deployment) == [
        f'{at}[0].matchLabelKeys[1]: Invalid value: "app.kubernetes.io/name": exists in both '
        "matchLabelKeys and labelSelector",
        f"{at}[1].maxSkew: Invalid value: 0: must be greater than zero",
        f"{at}[1].minDomains: Invalid value: 2: can only use minDomains if "
        "whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
        f"{at}[1].matchLabelKeys: Forbidden: must not be specified when labelSelector is not set",
        f'{at}[2]: Duplicate value: "{{{hostname}, DoNotSchedule}}"',
    ]


def test_service_named_target_port_must_exist_in_a_selected_pod() -> None:
    manifests = rendered()
    service = one(manifests, "Service", "llama")
    deployment = one(manifests, "Deployment", "llama")
    assert check_manifests([service, deployment]) == []
    service["spec"]["ports"][0]["targetPort"] = "web"
    [problem] = check_manifests([service, deployment])
    assert problem.severity is Severity.WARNING
    assert problem.path == "spec.ports[0].targetPort"
    assert problem.message.startswith('spec.ports[0].targetPort: Not found: "web": accepted')
    assert "no suitable port for manifest" in problem.message
    assert problem.source.endswith("pkg/api/v1/pod/util.go")
    # FindPort matches the protocol too.
    service["spec"]["ports"][0]["targetPort"] = "http"
    service["spec"]["ports"][0]["protocol"] = "UDP"
    assert "UDP port named http" in check_manifests([service, deployment])[0].message
    # Numbers need no lookup; pods that are not among the manifests cannot be compared.
    service["spec"]["ports"][0] = {"name": "http", "port": 8000, "targetPort": 8000}
    assert check_manifests([service, deployment]) == []
    service["spec"]["ports"][0]["targetPort"] = "web"
    assert check_manifests([service]) == []


def test_self_check_without_cel_python_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from podserve.kube.apiserver import self_check

    monkeypatch.setitem(sys.modules, "celpy", None)  # as if the kube extra were missing
    problems = self_check(rendered())
    assert [p.severity for p in problems] == [Severity.WARNING]
    assert "CRD CEL rules not evaluated: install podserve[kube] (cel-python)" in str(problems[0])
