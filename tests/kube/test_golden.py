"""Golden files: the examples render byte-for-byte as reviewed. Regenerate with
`PODSERVE_UPDATE_GOLDEN=1 pytest tests/kube/test_golden.py` and review the diff."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from podserve.kube.render import render
from podserve.kube.yamlio import dump_all
from tests.kube.conftest import CliRunner
from tests.kube.paths import EXAMPLES, GOLDEN, load_example

UPDATE = os.environ.get("PODSERVE_UPDATE_GOLDEN") == "1"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_golden(example: Path, cli: CliRunner) -> None:
    golden = GOLDEN / f"{example.stem}.yaml"
    code, out, _ = cli("render", str(example))
    assert code == 0
    assert out == dump_all(render(load_example(example)).manifests)
    if UPDATE:
        golden.write_text(out)
    assert golden.exists(), f"missing {golden}; run with PODSERVE_UPDATE_GOLDEN=1"
    assert out == golden.read_text(), f"{example.name} renders differently from {golden.name}"


def test_every_golden_has_an_example() -> None:
    assert {p.stem for p in GOLDEN.glob("*.yaml")} == {p.stem for p in EXAMPLES}


def test_render_to_directory_and_kustomize(tmp_path: Path, cli: CliRunner) -> None:
    example = EXAMPLES[0]
    stream = list(yaml.safe_load_all(cli("render", str(example))[1]))
    code, _, err = cli("render", str(example), "-o", str(tmp_path / "flat"))
    assert code == 0
    assert "wrote" in err
    files = sorted((tmp_path / "flat").iterdir())
    assert [yaml.safe_load(f.read_text()) for f in files] == stream
    assert files[0].name.startswith("01-")
    code, _, _ = cli("render", str(example), "-o", str(tmp_path / "base"), "--format", "kustomize")
    assert code == 0
    kustomization = yaml.safe_load((tmp_path / "base" / "kustomization.yaml").read_text())
    assert kustomization["resources"] == [f.name for f in files]
    assert kustomization["namespace"] == load_example(example).metadata.namespace


def test_render_reports_bad_specs(tmp_path: Path, cli: CliRunner) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: podserve.dev/v1alpha1\nkind: ModelService\nmetadata: {name: x}\n"
        "spec: {model: {uri: s3://x, digest: nope, runtime: onnx, loadSeconds: 1}}\n"
    )
    code, out, err = cli("render", str(bad))
    assert code == 2
    assert out == ""
    assert "spec.model.digest" in err
    assert cli("render", str(EXAMPLES[0]), "--format", "kustomize")[0] == 2
