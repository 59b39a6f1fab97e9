"""The CRDs' CEL rules (x-kubernetes-validations) evaluated with cel-python the way the API
server applies them on create: defaults first, `self` bound per schema node (list items one
by one), reserved field names escaped, transition rules skipped, the rule's message,
messageExpression, reason and fieldPath in the error."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from podserve.kube.apiserver.cel import apply_defaults, escape, evaluate_cel
from podserve.kube.render import render
from podserve.kube.types import Manifest, Severity
from podserve.kube.validation import CrdCatalog
from tests.kube.conftest import CliRunner
from tests.kube.paths import EXAMPLES, load_example

LLM = next(p for p in EXAMPLES if p.stem == "llm-gpu-keda-canary")


@pytest.fixture(scope="module")
def route() -> Manifest:
    manifests = render(load_example(LLM)).manifests
    return copy.deepcopy(next(m for m in manifests if m["kind"] == "HTTPRoute"))


def failures(manifest: Manifest, catalog: CrdCatalog) -> list[str]:
    return [e.message for e in evaluate_cel(manifest, catalog).errors]


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_custom_resources_pass_their_cel_rules(
    example: Path, crd_catalog: CrdCatalog
) -> None:
    for manifest in render(load_example(example)).manifests:
        result = evaluate_cel(manifest, crd_catalog)
        assert result.errors == [], [str(e) for e in result.errors]


def test_rules_really_run_per_node(route: Manifest, crd_catalog: CrdCatalog) -> None:
    result = evaluate_cel(route, crd_catalog)
    # Per rule, per matching node: two backendRefs each run their own rules, the one
    # defaulted path match runs its eleven.
    assert result.evaluated >= 20
    more = copy.deepcopy(route)
    more["spec"]["rules"][0]["backendRefs"].append(
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "x"}
    )
    assert evaluate_cel(more, crd_catalog).evaluated > result.evaluated


def test_gateway_api_path_rules(route: Manifest, crd_catalog: CrdCatalog) -> None:
    broken = copy.deepcopy(route)
    broken["spec"]["rules"][0]["matches"][0]["path"]["value"] = "v1//chat"
    assert failures(broken, crd_catalog) == [
        'spec.rules[0].matches[0].path: Invalid value: "object": value must be an absolute '
        "path and start with '/' when type one of ['Exact', 'PathPrefix']",
        "spec.rules[0].matches[0].path: Invalid value: \"object\": must not contain '//' when "
        "type one of ['Exact', 'PathPrefix']",
    ]


def test_defaults_apply_before_the_rules(route: Manifest, crd_catalog: CrdCatalog) -> None:
    # No kind: the CRD defaults it to Service, and a Service reference needs a port.
    broken = copy.deepcopy(route)
    broken["spec"]["rules"][0]["backendRefs"] = [{"name": "llama"}]
    assert failures(broken, crd_catalog) == [
        'spec.rules[0].backendRefs[0]: Invalid value: "object": Must have port for Service '
        "reference"
    ]
    broken["spec"]["rules"][0]["backendRefs"][0]["port"] = 8000
    assert failures(broken, crd_catalog) == []
    # No matches at all: the default `[{path: {type: PathPrefix, value: /}}]` is validated.
    schema = crd_catalog.schema_for(route)
    assert schema is not None
    bare = copy.deepcopy(route)
    del bare["spec"]["rules"][0]["matches"]
    defaulted = apply_defaults(schema, bare)
    assert defaulted["spec"]["rules"][0]["matches"] == [
        {"path": {"type": "PathPrefix", "value": "/"}}
    ]


def test_reserved_field_names_are_escaped(route: Manifest, crd_catalog: CrdCatalog) -> None:
    # The parentRefs rules read `p1.__namespace__`: the field `namespace` must reach CEL
    # escaped, or two references to one parent in one namespace would go unnoticed.
    broken = copy.deepcopy(route)
    broken["spec"]["parentRefs"].append(dict(broken["spec"]["parentRefs"][0]))
    assert failures(broken, crd_catalog) == [
        'spec.parentRefs: Invalid value: "array": sectionName must be unique when parentRefs '
        "includes 2 or more references to the same parent"
    ]
    other = copy.deepcopy(broken)
    other["spec"]["parentRefs"][1]["namespace"] = "elsewhere"
    assert failures(other, crd_catalog) == []
    assert escape("namespace") == "__namespace__"
    assert escape("x-y.z/w__v") == "x__dash__y__dot__z__slash__w__underscores__v"


def test_redirect_with_backends_and_scaled_object_bounds(
    route: Manifest, crd_catalog: CrdCatalog
) -> None:
    broken = copy.deepcopy(route)
    broken["spec"]["rules"][0]["filters"] = [
        {"type": "RequestRedirect", "requestRedirect": {"scheme": "https"}}
    ]
    assert failures(broken, crd_catalog) == [
        'spec.rules[0]: Invalid value: "object": RequestRedirect filter must not be used '
        "together with backendRefs"
    ]
    scaled = next(m for m in render(load_example(LLM)).manifests if m["kind"] == "ScaledObject")
    scaled = copy.deepcopy(scaled)
    scaled["spec"]["minReplicaCount"], scaled["spec"]["maxReplicaCount"] = 9, 8
    assert failures(scaled, crd_catalog) == [
        'spec: Invalid value: "object": minReplicaCount must be less than or equal to '
        "maxReplicaCount"
    ]
    pool = copy.deepcopy(
        next(m for m in render(load_example(LLM)).manifests if m["kind"] == "InferencePool")
    )
    pool["spec"]["targetPorts"] = [{"number": 8000}, {"number": 8000}]
    assert failures(pool, crd_catalog) == [
        'spec.targetPorts: Invalid value: "array": port number must be unique'
    ]


def _widget_crd(rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com",
            "names": {"kind": "Widget", "plural": "widgets"},
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "x-kubernetes-validations": rules,
                                    "properties": {
                                        "low": {"type": "integer"},
                                        "high": {"type": "integer"},
                                        "url": {"type": "string"},
                                    },
                                },
                            },
                        }
                    },
                }
            ],
        },
    }


def test_rule_semantics_beyond_the_bundled_crds(tmp_path: Path) -> None:
    rules: list[dict[str, Any]] = [
        {
            "rule": "self.low <= self.high",
            "messageExpression": "'low ' + string(self.low) + ' is above high'",
        },
        {
            "rule": "self.high < 100",
            "reason": "FieldValueForbidden",
            "fieldPath": ".high",
            "message": "too high",
        },
        {"rule": "self.low >= oldSelf.low", "message": "low may not shrink"},
        {
            "rule": "!oldSelf.hasValue() || self.high >= oldSelf.value().high",
            "optionalOldSelf": True,
        },
        {"rule": "!has(self.url) || isURL(self.url)", "message": "not a URL"},
        {"rule": "self.low != 7"},
    ]
    (tmp_path / "widget.yaml").write_text(yaml.safe_dump(_widget_crd(rules)))
    catalog = CrdCatalog.bundled([tmp_path])
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    ok = evaluate_cel({**widget, "spec": {"low": 1, "high": 2}}, catalog)
    # oldSelf: not run on create; with optionalOldSelf the server would run it, podserve
    # cannot (no CEL optionals in cel-python) and says so.
    assert ok.transition_skipped == 2
    [unevaluated] = ok.errors
    assert unevaluated.severity is Severity.WARNING
    assert "optionalOldSelf" in unevaluated.message
    bad = evaluate_cel({**widget, "spec": {"low": 300, "high": 200, "url": "x"}}, catalog)
    found = [(e.severity, e.message) for e in bad.errors if "optionalOldSelf" not in e.message]
    assert found[:2] == [
        (Severity.ERROR, 'spec: Invalid value: "object": low 300 is above high'),
        (Severity.ERROR, "spec.high: Forbidden: too high"),
    ]
    # Kubernetes' CEL libraries (isURL, quantity, ...) are not in cel-python: said, not hidden.
    [(severity, message)] = found[2:]
    assert severity is Severity.WARNING
    assert message.startswith('spec: Invalid value: "object": CEL rule not evaluated by podserve')
    assert "isURL" in message
    plain = evaluate_cel({**widget, "spec": {"low": 7, "high": 8}}, catalog)
    assert [e.message for e in plain.errors if e.severity is Severity.ERROR] == [
        'spec: Invalid value: "object": failed rule: self.low != 7'
    ]


def test_lint_strict_runs_schema_server_checks_and_cel(
    cli: CliRunner, route: Manifest, tmp_path: Path
) -> None:
    broken = copy.deepcopy(route)
    broken["spec"]["rules"][0]["matches"][0]["path"]["value"] = "v1"
    pdb = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "p", "namespace": "llm"},
        "spec": {
            "minAvailable": 1,
            "maxUnavailable": 1,
            "selector": {"matchLabels": {"a": "b"}},
            "notAField": 1,
        },
    }
    path = tmp_path / "objects.yaml"
    path.write_text(yaml.safe_dump_all([broken, pdb]))
    assert cli("lint", str(path))[0] == 0  # plain lint: no rule about these
    code, out, _ = cli("lint", "--strict", str(path))
    assert code == 1
    assert "error[crd-cel] HTTPRoute/llm/llama spec.rules[0].matches[0].path:" in out
    assert "must be an absolute path and start with '/'" in out
    assert "error[api-server] PodDisruptionBudget/llm/p spec: Invalid value: {" in out
    assert "minAvailable and maxUnavailable cannot be both set" in out
    assert "error[schema] PodDisruptionBudget/llm/p" in out
    assert "kubernetes 1.30, kubernetes 1.33, kubernetes 1.35, kubernetes 1.37" in out
    code, out, _ = cli("lint", "--strict", "--ignore", "schema", "--ignore", "crd-cel", str(path))
    assert "[schema]" not in out
    assert "[crd-cel]" not in out
    code, out, _ = cli("lint", "--strict", "--format", "sarif", str(path))
    rules = json.loads(out)["runs"][0]["tool"]["driver"]["rules"]
    assert {"schema", "api-server", "crd-cel"} <= {r["id"] for r in rules}


def test_lint_strict_crd_dir(cli: CliRunner, tmp_path: Path) -> None:
    crds = tmp_path / "crds"
    crds.mkdir()
    (crds / "widget.yaml").write_text(
        yaml.safe_dump(_widget_crd([{"rule": "self.low <= self.high", "message": "low > high"}]))
    )
    widget = {
        "apiVersion": "example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w"},
        "spec": {"low": 3, "high": 2},
    }
    path = tmp_path / "widget.yaml"
    path.write_text(yaml.safe_dump(widget))
    code, out, _ = cli("lint", "--strict", str(path))
    assert code == 1
    assert "no CRD for example.com/v1 Widget" in out
    code, out, _ = cli("lint", "--strict", "--crd-dir", str(crds), str(path))
    assert code == 1
    assert "no CRD" not in out
    assert 'error[crd-cel] Widget/w spec: Invalid value: "object": low > high' in out
    assert cli("lint", "--strict", "--crd-dir", str(tmp_path / "absent"), str(path))[0] == 2
