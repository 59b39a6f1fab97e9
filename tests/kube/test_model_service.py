"""The ModelService spec: what it accepts, what it refuses and why, and the published
schema and reference staying in step with the code."""

from __future__ import annotations

import json
from typing import Any

import pytest

from podserve.config.model_service import (
    ModelService,
    ModelServiceSpec,
    load_model_service,
    model_service_json_schema,
    quantity_value,
)
from podserve.core.errors import InvalidInput
from podserve.kube.spec_docs import spec_markdown
from tests.kube.conftest import CliRunner
from tests.kube.paths import EXAMPLES, REPO_ROOT

DIGEST = "sha256:" + "ab" * 32


def minimal(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": {"uri": "s3://m/x", "digest": DIGEST, "runtime": "sklearn", "loadSeconds": 10},
    }
    body.update(spec)
    return {
        "apiVersion": "podserve.dev/v1alpha1",
        "kind": "ModelService",
        "metadata": {"name": "m", "namespace": "ns"},
        "spec": body,
    }


def test_minimal_spec_fills_defaults() -> None:
    service = ModelService.model_validate(minimal())
    assert service.spec.replicas.min == 1
    assert service.spec.gpu.count == 0
    assert service.spec.image.ref == "ghcr.io/podserve/podserve:0.1.0"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"replicas": {"min": 3, "max": 2}}, "above replicas.max"),
        ({"replicas": {"min": 1, "max": 3}}, "needs an autoscaling section"),
        (
            {
                "gpu": {"count": 1},
                "replicas": {"min": 1, "max": 3},
                "autoscaling": {"metric": "cpu", "target": "70"},
            },
            "forceCpu",
        ),
        (
            {
                "replicas": {"min": 0, "max": 3},
                "autoscaling": {
                    "engine": "hpa",
                    "scaleToZero": True,
                    "activation": {"query": "sum(x)"},
                },
            },
            "engine keda",
        ),
        ({"replicas": {"min": 0, "max": 3}, "autoscaling": {"scaleToZero": True}}, "activation"),
        ({"replicas": {"min": 1, "max": 3}, "autoscaling": {"metric": "ttft-p95"}}, "generative"),
        (
            {"replicas": {"min": 1, "max": 3}, "autoscaling": {"scaleDownStabilizationSeconds": 5}},
            "must exceed model.loadSeconds",
        ),
        (
            {"replicas": {"min": 2, "max": 2}, "disruption": {"minAvailable": 2}},
            "below replicas.min",
        ),
        ({"cache": {"kind": "pvc", "claimName": "models"}}, "Multi-Attach"),
        ({"gpu": {"count": 2, "timeSlicing": True}}, "count 1"),
        (
            {
                "canary": {
                    "model": {
                        "uri": "s3://m/y",
                        "digest": DIGEST,
                        "runtime": "sklearn",
                        "loadSeconds": 10,
                    }
                }
            },
            "needs a gateway",
        ),
        ({"resources": {"memory": "lots"}}, "not a Kubernetes quantity"),
        ({"resources": {"cpu": "2", "cpuLimit": "1"}}, "above resources.cpu"),
        ({"coldStart": {"headroomPods": 1}}, "uses none"),
        ({"unknownField": 1}, "Extra inputs"),
    ],
)
def test_incoherent_specs_are_refused_with_the_reason(spec: dict[str, Any], message: str) -> None:
    import yaml

    with pytest.raises(InvalidInput, match=message):
        load_model_service(yaml.safe_dump(minimal(**spec)), "spec.yaml")


def test_unpinned_model_is_refused() -> None:
    body = minimal()
    body["spec"]["model"]["digest"] = "latest"
    with pytest.raises(InvalidInput, match="digest"):
        load_model_service(json.dumps(body))


def test_quantities() -> None:
    assert quantity_value("500m") == quantity_value("0.5")
    assert quantity_value("1Gi") == 2**30
    assert quantity_value("2G") == 2 * 10**9


def test_examples_parse() -> None:
    assert len(EXAMPLES) >= 3
    for path in EXAMPLES:
        assert load_model_service(path.read_text(), str(path)).kind == "ModelService"


def test_published_schema_matches_the_model(cli: CliRunner) -> None:
    published = json.loads((REPO_ROOT / "schemas" / "modelservice.schema.json").read_text())
    assert published == model_service_json_schema(), "regenerate: podserve schema > schemas/..."
    code, out, _ = cli("schema")
    assert code == 0
    assert json.loads(out) == published


def test_schema_validates_the_examples() -> None:
    import jsonschema
    import yaml

    schema = model_service_json_schema()
    for path in EXAMPLES:
        jsonschema.validate(yaml.safe_load(path.read_text()), schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(
            {
                "apiVersion": "podserve.dev/v1alpha1",
                "kind": "ModelService",
                "metadata": {"name": "x"},
                "spec": {"model": {}},
            },
            schema,
        )


def test_field_reference_matches_the_model(cli: CliRunner) -> None:
    documented = (REPO_ROOT / "docs" / "modelservice.md").read_text()
    assert documented == spec_markdown(), "regenerate: podserve schema --format markdown"
    code, out, _ = cli("schema", "--format", "markdown")
    assert code == 0
    assert out == documented
    for info in ModelServiceSpec.model_fields.values():
        assert f"| `{info.alias}` |" in documented
