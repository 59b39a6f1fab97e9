"""`podserve render` of a `kind: Gateway` spec, and the gateway lint rule on its output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from podserve.config.gateway_config import load_gateway_config
from podserve.config.gateway_spec import load_gateway_spec
from podserve.core.errors import InvalidInput
from podserve.kube.lint import ALL_RULES, lint_documents
from podserve.kube.render.gateway import render_gateway
from podserve.kube.yamlio import dump_all, parse_documents
from tests.gateway.support import ROOT

SPEC = ROOT / "examples" / "gateway" / "gateway-k8s.yaml"


def _render(text: str) -> list[dict[str, Any]]:  # manifests: nested YAML data
    return list(render_gateway(load_gateway_spec(text, "spec")))


def test_render_makes_the_objects_a_replicated_proxy_needs() -> None:
    objects = _render(SPEC.read_text())
    kinds = sorted(str(o["kind"]) for o in objects)
    assert kinds == [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
    ]
    by_kind = {str(o["kind"]): o for o in objects}
    deployment = by_kind["Deployment"]
    assert deployment["spec"]["replicas"] >= 2
    hpa = by_kind["HorizontalPodAutoscaler"]["spec"]
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:3] == ["gateway", "--config", "/etc/podserve-gateway/gateway.yaml"]
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert refs["GATEWAY_REDIS_URL"] == {"name": "gateway-store", "key": "redis-url"}
    assert refs["HOSTED_API_KEY"] == {"name": "hosted-provider", "key": "api-key"}
    assert "Secret" not in kinds  # referenced, never rendered
    config_text = by_kind["ConfigMap"]["data"]["gateway.yaml"]
    config = load_gateway_config(config_text)
    assert config.store.kind == "redis-postgres"
    assert [p.weight for p in config.pools] == [95, 5]


def test_rendered_gateway_lints_clean() -> None:
    documents = parse_documents(dump_all(_render(SPEC.read_text())), "rendered")
    result = lint_documents(documents, ALL_RULES)
    assert [(f.rule_id, f.message) for f in result.findings] == []


def test_rendering_is_deterministic() -> None:
    assert dump_all(_render(SPEC.read_text())) == dump_all(_render(SPEC.read_text()))


def test_the_lint_rule_flags_the_same_deployment_on_sqlite() -> None:
    objects = _render(SPEC.read_text())
    for obj in objects:
        if obj["kind"] == "ConfigMap":
            body = yaml.safe_load(obj["data"]["gateway.yaml"])
            body["store"] = {"kind": "sqlite", "path": "/tmp/gw.db"}
            obj["data"]["gateway.yaml"] = yaml.safe_dump(body)
    result = lint_documents(parse_documents(dump_all(objects), "edited"), ALL_RULES)
    assert [f.rule_id for f in result.findings] == ["gateway-replicas-without-shared-store"]


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (
            lambda s: s.replace(
                "kind: redis-postgres, redisEnv: GATEWAY_REDIS_URL, postgresEnv:"
                " GATEWAY_POSTGRES_DSN",
                "kind: sqlite",
            ),
            "redis-postgres",
        ),
        (lambda s: s.replace("replicas: 2", "replicas: 1"), "replicas"),
        (
            lambda s: s.replace(
                "    - {env: HOSTED_API_KEY, secret: hosted-provider, key: api-key}\n", ""
            ),
            "HOSTED_API_KEY",
        ),
        (lambda s: s.replace("weight: 5}", "weight: 5, wieght: 1}"), "wieght"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(edit: object, needle: str) -> None:
    text = edit(SPEC.read_text())  # type: ignore[operator]
    with pytest.raises(InvalidInput, match=needle):
        load_gateway_spec(text, "spec")


def test_podserve_render_dispatches_on_kind(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "podserve.cli.main", "render", str(SPEC)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    kinds = [d["kind"] for d in yaml.safe_load_all(done.stdout) if d]
    assert "HorizontalPodAutoscaler" in kinds
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPEC.read_text().replace("replicas: 2", "replicas: 1"))
    refused = subprocess.run(
        [sys.executable, "-m", "podserve.cli.main", "render", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "replicas" in refused.stderr
