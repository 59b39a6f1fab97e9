"""Every rendered object validates against the Kubernetes OpenAPI schemas of several minor
versions (kubernetes-validate, strict) and every custom resource against its CRD."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from podserve.core.errors import InvalidInput
from podserve.kube.render import render
from podserve.kube.validation import (
    KUBERNETES_VERSIONS,
    CrdCatalog,
    is_builtin,
    shared_crd_dir,
    validate_manifests,
)
from tests.kube.paths import EXAMPLES, REPO_ROOT, load_example


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
    assert custom <= {"ScaledObject", "PodMonitor", "PrometheusRule", "HTTPRoute", "InferencePool"}


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


def test_missing_crd_directory_fails_clearly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PODSERVE_SHARED_DIR", str(tmp_path))
    assert shared_crd_dir(REPO_ROOT) == tmp_path / "crds"
    with pytest.raises(InvalidInput, match="does not exist"):
        CrdCatalog.load(shared_crd_dir(REPO_ROOT))
