"""Every rendered object validates against the Kubernetes OpenAPI schemas of several minor
versions (kubernetes-validate, strict) and every custom resource against its CRD."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from podserve.core.errors import InvalidInput
from podserve.kube.render import render
from podserve.kube.validation import (
    KUBERNETES_VERSIONS,
    CrdCatalog,
    is_builtin,
    validate_manifests,
)
from tests.kube.paths import EXAMPLES, load_example


def test_at_least_three_minor_versions_bundled() -> None:
    from kubernetes_validate.utils import all_versions

    bundled = {v.rsplit(".", 1)[0] for v in all_versions()}
    assert len(KUBERNETES_VERSIONS) >= 3
    assert set(KUBERNETES_VERSIONS) <= bundled


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_rendered_objects_validate(example: Path, crd_catalog: CrdCatalog) -> None:
    manifests = render(load_example(example)).manifests
    assert validate_manifests(manifests, crd_catalog) == []
    custom = {m["kind"] for m in manifests if not is_builtin(m)}
    assert custom <= {
        "ScaledObject",
        "TriggerAuthentication",
        "PodMonitor",
        "PrometheusRule",
        "HTTPRoute",
        "InferencePool",
    }


def test_custom_resources_are_checked_against_their_crd(crd_catalog: CrdCatalog) -> None:
    manifests = render(load_example(EXAMPLES[0])).manifests
    custom = [m for m in manifests if not is_builtin(m)]
    assert custom, "the example renders custom resources"
    for manifest in custom:
        broken = copy.deepcopy(manifest)
        broken["spec"]["notAField"] = True
        problems = validate_manifests([broken], crd_catalog)
        assert problems
        assert "notAField" in problems[0].message


def test_builtin_typos_fail_on_every_version(crd_catalog: CrdCatalog) -> None:
    deployment = next(
        m for m in render(load_example(EXAMPLES[0])).manifests if m["kind"] == "Deployment"
    )
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["livenessProbe"]["periodSecond"] = 3
    problems = validate_manifests([broken], crd_catalog)
    assert {p.schema for p in problems} == {f"kubernetes {v}" for v in KUBERNETES_VERSIONS}


def test_unknown_custom_kind_is_a_problem(crd_catalog: CrdCatalog) -> None:
    problems = validate_manifests(
        [{"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}], crd_catalog
    )
    assert problems
    assert "no CRD" in problems[0].message


def test_missing_crd_directory_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="does not exist"):
        CrdCatalog.load(tmp_path / "absent")
    with pytest.raises(InvalidInput, match="no CRDs"):
        CrdCatalog.load(tmp_path)


def test_bundled_catalog_covers_every_custom_kind_podserve_renders() -> None:
    kinds = {kind for (_, kind) in CrdCatalog.bundled().schemas}
    assert {
        "ScaledObject",
        "TriggerAuthentication",
        "PodMonitor",
        "ServiceMonitor",
        "PrometheusRule",
        "HTTPRoute",
        "InferencePool",
    } <= kinds


def test_extra_crd_directory_adds_kinds(tmp_path: Path) -> None:
    widget = {
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
                                "apiVersion": {"type": "string"},
                                "kind": {"type": "string"},
                                "metadata": {"type": "object"},
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
    (tmp_path / "widgets.yaml").write_text(yaml.safe_dump(widget))
    catalog = CrdCatalog.bundled([tmp_path])
    good = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert validate_manifests([{**good, "spec": {"size": 3}}], catalog) == []
    problems = validate_manifests([{**good, "spec": {"size": "big"}}], catalog)
    assert problems
    assert "size" in problems[0].path
    assert ("keda.sh/v1alpha1", "ScaledObject") in catalog.schemas
