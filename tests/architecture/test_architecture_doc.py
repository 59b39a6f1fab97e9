"""docs/architecture.md shows the import contract CI enforces: its layer diagram and
contract list are generated from pyproject.toml, and this test fails when they drift."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_import_contract_in_the_docs_is_pyprojects() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts/gen_architecture_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_every_layer_and_package_named_in_pyproject_is_in_the_diagram() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in contracts["contracts"] if c["type"] == "layers")["layers"]
    for layer in layers:
        row = " | ".join(m.strip().removeprefix("podserve.") for m in layer.split("|"))
        assert f"  {row}\n" in doc, row


def test_the_docs_say_where_an_engine_a_gateway_and_a_metric_go() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    for heading in (
        "### A second text engine",
        "### The gateway",
        "### A new metric",
    ):
        assert heading in doc
    # the seams those sections name exist
    for path in (
        "src/podserve/generation/client.py",
        "src/podserve/engine/worker.py",
        "src/podserve/obs/collector.py",
        "src/podserve/dataplane/build.py",
    ):
        assert (ROOT / path).is_file(), path
