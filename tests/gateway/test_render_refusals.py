"""What `podserve render` refuses in a `kind: Gateway` spec that the spec model lets
through (kube/render/gateway_checks.py): a fail-open divisor below the HPA's ceiling,
resources that are not quantities, an env var set twice, namespaces that cannot exist."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from podserve.config.gateway_config import load_gateway_config
from podserve.config.gateway_spec import load_gateway_spec
from podserve.core.errors import InvalidInput
from podserve.kube.render.gateway import render_gateway
from tests.gateway.support import ROOT

SPEC = ROOT / "examples" / "gateway" / "gateway-k8s.yaml"


def _render(text: str) -> list[dict[str, Any]]:  # manifests: nested YAML data
    return list(render_gateway(load_gateway_spec(text, "spec")))


def _spec_with(edit: Any) -> str:  # YAML data: the example spec, edited
    raw = yaml.safe_load(SPEC.read_text())
    edit(raw["spec"])
    return yaml.safe_dump(raw)


def test_fail_open_must_divide_the_budget_by_every_replica_the_hpa_may_run() -> None:
    """Each replica admits budget ÷ failOpen.replicas while the store is down: with the
    HPA allowed 8 replicas, a rolling update's surge pod beside them, and the divisor left
    at 1, the gateway could spend 9 budgets; 8 (the HPA's ceiling alone) is still short."""

    def fail_open(replicas: int | None) -> Any:
        def edit(spec: dict[str, Any]) -> None:
            spec["config"]["failOpen"] = {"enabled": True}
            if replicas is not None:
                spec["config"]["failOpen"]["replicas"] = replicas

        return edit

    for divisor in (None, 2, 7, 8):
        shown = 1 if divisor is None else divisor
        with pytest.raises(
            InvalidInput,
            match=rf"failOpen\.replicas is {shown} but maxReplicas is 8, and a rolling "
            rf"update adds 1 pod: .* so 9 replicas .* at least 9",
        ):
            _render(_spec_with(fail_open(divisor)))
    rendered = _render(_spec_with(fail_open(9)))
    hpa = next(o for o in rendered if o["kind"] == "HorizontalPodAutoscaler")
    assert hpa["spec"]["maxReplicas"] == 8  # refused, never rewritten: the user's ceiling stays
    deployment = next(o for o in rendered if o["kind"] == "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 1  # the pod counted
    config = next(o for o in rendered if o["kind"] == "ConfigMap")["data"]["gateway.yaml"]
    assert load_gateway_config(config).fail_open.replicas == 9


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda s: s.update(cpu="banana"), r"cpu: 'banana' is not a Kubernetes quantity"),
        (lambda s: s.update(memory="lots"), r"memory: 'lots' is not a Kubernetes quantity"),
        (lambda s: s.update(cpu="0"), r"cpu: '0' must be more than zero"),
        (lambda s: s.update(memory="512m"), r"memory: '512m' is 0\.512 bytes"),
        (
            lambda s: s["secrets"].append({"env": "HOSTED_API_KEY", "secret": "other", "key": "k"}),
            r"env var\(s\) HOSTED_API_KEY set more than once",
        ),
        (
            lambda s: (
                s["secrets"].append({"env": "NO_PROXY", "secret": "other", "key": "k"})
                or s.update(egressProxy={"noProxy": [".svc"]})
            ),
            r"env var\(s\) NO_PROXY set more than once",
        ),
        (
            lambda s: s.update(allowFromNamespaces=["Apps_1"]),
            r"allowFromNamespaces: 'Apps_1' is not a namespace name",
        ),
        (
            lambda s: s.update(allowFromNamespaces=["a" * 64]),
            r"allowFromNamespaces: 'a{64}' is not a namespace name",
        ),
        (
            lambda s: s.update(monitoring={"prometheusNamespaces": ["Mon itoring"]}),
            r"monitoring\.prometheusNamespaces: 'Mon itoring' is not a namespace name",
        ),
    ],
)
def test_render_refuses_what_the_cluster_or_the_gateway_could_not_use(
    edit: Any, needle: str
) -> None:
    with pytest.raises(InvalidInput, match=needle):
        _render(_spec_with(edit))


def test_valid_resources_and_namespaces_still_render() -> None:
    def edit(spec: dict[str, Any]) -> None:
        spec.update(cpu="500m", memory="1Gi", allowFromNamespaces=["apps", "9-team", "a" * 63])

    deployment = next(o for o in _render(_spec_with(edit)) if o["kind"] == "Deployment")
    resources = deployment["spec"]["template"]["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "500m", "memory": "1Gi"}
