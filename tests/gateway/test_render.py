"""`podserve render` of a `kind: Gateway` spec, and the gateway lint rule on its output."""

from __future__ import annotations

import re
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
from podserve.kube.validation import CrdCatalog, validate_manifests
from podserve.kube.yamlio import dump_all, parse_documents
from tests.gateway.support import ROOT

SPEC = ROOT / "examples" / "gateway" / "gateway-k8s.yaml"
NS_LABEL = "kubernetes.io/metadata.name"


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
        "PodMonitor",
        "PrometheusRule",
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


def test_rendered_gateway_validates_against_the_schemas() -> None:
    """The Kubernetes OpenAPI schemas of each bundled minor version, and the shipped CRDs
    for the PodMonitor and PrometheusRule."""
    problems = validate_manifests(_render(SPEC.read_text()), CrdCatalog.bundled())
    assert problems == []


def test_the_pod_monitor_scrapes_the_gateways_own_pods_and_port() -> None:
    by_kind = {str(o["kind"]): o for o in _render(SPEC.read_text())}
    template = by_kind["Deployment"]["spec"]["template"]
    monitor = by_kind["PodMonitor"]["spec"]
    selected = monitor["selector"]["matchLabels"]
    assert selected.items() <= template["metadata"]["labels"].items()
    ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
    endpoint = monitor["podMetricsEndpoints"][0]
    assert endpoint["port"] in ports
    assert endpoint["path"] == "/metrics"
    # the pod label the `gateway` series label is copied from is one the pods carry
    source = endpoint["relabelings"][0]["sourceLabels"][0]
    assert any(
        source == "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9]", "_", label)
        for label in template["metadata"]["labels"]
    )
    # allowFromNamespaces limits callers to [apps]: Prometheus's namespace is let in too
    policy = by_kind["NetworkPolicy"]["spec"]["ingress"][0]["from"]
    names = [f["namespaceSelector"]["matchLabels"][NS_LABEL] for f in policy]
    assert names == ["apps", "monitoring"]


def test_the_alerts_select_series_the_gateway_exports() -> None:
    """Each metric an alert reads is in the gateway's real exposition, with the labels the
    alert matches on (`namespace` and `gateway` are the scrape's target labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    from podserve.gateway.metrics import GatewayMetrics

    metrics = GatewayMetrics()
    metrics.request("tenant", "team", "m", "pool", 503).inc()
    metrics.rejection("store").inc()
    exported: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(metrics.exposition().decode()):
        for sample in family.samples:
            exported.setdefault(sample.name, set()).update(sample.labels)
    rule = next(o for o in _render(SPEC.read_text()) if o["kind"] == "PrometheusRule")
    alerts = rule["spec"]["groups"][0]["rules"]
    assert {a["alert"] for a in alerts} == {
        "PodserveGatewayStoreUnavailable",
        "PodserveGatewayErrorRatioHigh",
        "PodserveGatewayOverloaded",
    }
    for alert in alerts:
        selectors = re.findall(r"(podserve_gateway_\w+)\{([^}]*)\}", alert["expr"])
        assert selectors, alert["expr"]
        for name, matchers in selectors:
            assert name in exported, name
            used = {m.split("=")[0].rstrip("!~") for m in matchers.split(",")}
            assert used - {"namespace", "gateway"} <= exported[name], (name, used)
            assert 'namespace="ml"' in matchers
            assert 'gateway="llm-gateway"' in matchers
    # the `reason` values the alerts match are the refusals' own
    from podserve.gateway.errors import Overloaded, StoreDown

    expressions = " ".join(a["expr"] for a in alerts)
    for reason in (StoreDown.reason, Overloaded.reason):
        assert f'reason="{reason}"' in expressions


def test_monitoring_can_be_left_out() -> None:
    text = SPEC.read_text().replace(
        "  config:\n", "  monitoring: {podMonitor: false, rules: false}\n  config:\n", 1
    )
    objects = _render(text)
    assert not {"PodMonitor", "PrometheusRule"} & {str(o["kind"]) for o in objects}
    policy = next(o for o in objects if o["kind"] == "NetworkPolicy")["spec"]["ingress"][0]
    names = [f["namespaceSelector"]["matchLabels"][NS_LABEL] for f in policy["from"]]
    assert names == ["apps"]  # nothing scrapes: Prometheus's namespace is not let in


def test_what_checkov_checks_holds_and_each_skip_has_its_reason() -> None:
    """checkov 3.3.30 passes the rendered example with two reasoned skips
    (scripts/checkov-examples.sh, docs/kubernetes.md "checkov"); kept true without it."""
    deployment = next(o for o in _render(SPEC.read_text()) if o["kind"] == "Deployment")
    skips = {
        value.split("=", 1)[0]: value.split("=", 1)[1]
        for key, value in deployment["metadata"]["annotations"].items()
        if key.startswith("checkov.io/skip")
    }
    assert set(skips) == {"CKV_K8S_11", "CKV_K8S_35"}
    assert all(len(reason) > 40 for reason in skips.values())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "cpu" not in container["resources"]["limits"]  # what CKV_K8S_11's skip is for
    assert "@sha256:" in container["image"]  # CKV_K8S_43, and CKV_K8S_15 with it


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


def _with_proxy(extra: str, *, secrets: str = "") -> str:
    text = SPEC.read_text().replace("  config:\n", f"{extra}  config:\n", 1)
    return text.replace("  secrets:\n", f"  secrets:\n{secrets}", 1)


@pytest.mark.parametrize(
    ("url", "port", "tls"),
    [("http://proxy.corp:3128", 3128, False), ("https://proxy.corp", 443, True)],
)
def test_an_egress_proxy_is_rendered_as_the_environment_the_gateway_reads(
    url: str, port: int, tls: bool
) -> None:
    from podserve.config.egress_proxy import ProxySettings

    text = _with_proxy(
        f"  egressProxy:\n    httpsProxy: {url}\n    noProxy: [.svc, .cluster.local, 10.0.0.0/8]\n"
    )
    deployment = next(o for o in _render(text) if o["kind"] == "Deployment")
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    values = {e["name"]: e["value"] for e in env if "value" in e}
    assert values == {"HTTPS_PROXY": url, "NO_PROXY": ".svc,.cluster.local,10.0.0.0/8"}
    # what the gateway makes of that environment: the hosted API through the proxy,
    # the pods direct
    settings = ProxySettings.from_env(values)
    proxy = settings.for_origin("https", "api.example.com", 443)
    assert proxy is not None
    assert (proxy.host, proxy.port, proxy.tls) == ("proxy.corp", port, tls)
    assert settings.for_origin("http", "tiny-lm.ml.svc", 8000) is None
    documents = parse_documents(dump_all(_render(text)), "rendered")
    assert not lint_documents(documents, ALL_RULES).findings


@pytest.mark.parametrize("variable", ["HTTPS_PROXY", "ALL_PROXY"])
def test_a_proxy_url_from_a_secret_still_needs_no_proxy_for_the_pods(variable: str) -> None:
    secret = f"    - {{env: {variable}, secret: egress, key: url}}\n"
    with pytest.raises(InvalidInput, match=r"egressProxy\.noProxy with the pods' domains"):
        load_gateway_spec(_with_proxy("", secrets=secret), "spec")
    text = _with_proxy("  egressProxy: {noProxy: [.svc]}\n", secrets=secret)
    deployment = next(o for o in _render(text) if o["kind"] == "Deployment")
    env = {e["name"]: e for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env[variable]["valueFrom"]["secretKeyRef"] == {"name": "egress", "key": "url"}
    assert env["NO_PROXY"]["value"] == ".svc"


def test_all_proxy_in_a_secret_beside_a_literal_https_proxy_is_not_a_conflict() -> None:
    """The literal wins for https (a scheme's own variable before ALL_PROXY); ALL_PROXY
    still proxies http, so the http pods must be in noProxy."""
    secret = "    - {env: ALL_PROXY, secret: egress, key: url}\n"
    literal = "  egressProxy: {httpsProxy: 'http://p:3128', noProxy: [.svc]}\n"
    load_gateway_spec(_with_proxy(literal, secrets=secret), "spec")
    without = "  egressProxy: {httpsProxy: 'http://p:3128', noProxy: [.example.com]}\n"
    with pytest.raises(InvalidInput, match=r"pool chat's endpoint http://tiny-lm\.ml\.svc"):
        load_gateway_spec(_with_proxy(without, secrets=secret), "spec")
    own = "    - {env: HTTPS_PROXY, secret: egress, key: url}\n"
    with pytest.raises(InvalidInput, match=r"https proxy is set both here and in spec\.secrets"):
        load_gateway_spec(_with_proxy(literal, secrets=own), "spec")


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (  # the pods are *.ml.svc: a proxy could not reach them
            "  egressProxy: {httpsProxy: 'http://p:3128', httpProxy: 'http://p:3128', "
            "noProxy: [.cluster.local]}\n",
            r"pool chat's endpoint http://tiny-lm\.ml\.svc:8000 would go through",
        ),
        (
            "  egressProxy: {httpsProxy: 'http://user:pw@p:3128'}\n",
            "credentials belong in a Secret",
        ),
        ("  egressProxy: {httpsProxy: 'socks4://p:1080'}\n", "only http://, https://, socks5://"),
    ],
)
def test_an_egress_proxy_that_would_not_work_is_refused(extra: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        load_gateway_spec(_with_proxy(extra), "spec")


def _lint_ids(objects: list[dict[str, Any]]) -> list[tuple[str, str]]:
    result = lint_documents(parse_documents(dump_all(objects), "edited"), ALL_RULES)
    return [(f.rule_id, f.message) for f in result.findings]


def _gateway_env(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    env: list[dict[str, Any]] = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    return env


def test_lint_flags_a_hand_edited_no_proxy_that_misses_the_pods() -> None:
    objects = _render(
        _with_proxy("  egressProxy: {httpsProxy: 'http://p:3128', httpProxy: 'http://p:3128'}\n")
    )
    for entry in _gateway_env(objects):
        if entry["name"] == "NO_PROXY":
            entry["value"] = ".cluster.local"  # the pods are *.ml.svc
    found = _lint_ids(objects)
    assert [rule for rule, _ in found] == ["gateway-pods-through-egress-proxy"] * 2
    assert "pool chat's endpoint http://tiny-lm.ml.svc:8000 would go through" in found[0][1]


def test_lint_flags_a_proxy_from_a_secret_without_no_proxy() -> None:
    objects = _render(SPEC.read_text())
    env = _gateway_env(objects)
    env.append({"name": "HTTP_PROXY", "valueFrom": {"secretKeyRef": {"name": "e", "key": "u"}}})
    assert {rule for rule, _ in _lint_ids(objects)} == {"gateway-pods-through-egress-proxy"}
    # a NO_PROXY the linter cannot read (from a Secret) is not second-guessed
    env.append({"name": "NO_PROXY", "valueFrom": {"secretKeyRef": {"name": "e", "key": "n"}}})
    assert _lint_ids(objects) == []
    # an https-only proxy leaves the http pods direct
    env[-2]["name"] = "HTTPS_PROXY"
    env.pop()
    assert _lint_ids(objects) == []
    # ALL_PROXY reaches http as well (the gateway reads it for a scheme without its own)
    env[-1]["name"] = "ALL_PROXY"
    assert {rule for rule, _ in _lint_ids(objects)} == {"gateway-pods-through-egress-proxy"}
