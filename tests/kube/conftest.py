"""Shared paths and helpers of the Kubernetes tooling tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from podserve.cli.main import main
from podserve.kube.validation import CrdCatalog

CliRunner = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="session")
def crd_catalog() -> CrdCatalog:
    # The CRDs shipped inside the package: what a user's `podserve` validates against.
    return CrdCatalog.bundled()


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> CliRunner:
    """Run `podserve ARGS...` through the real entry point; returns (code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
