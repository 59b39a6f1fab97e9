"""Shared paths and helpers of the Kubernetes tooling tests."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from podserve.cli.main import main
from podserve.kube.validation import CrdCatalog, shared_crd_dir
from tests.kube.paths import REPO_ROOT

CliRunner = Callable[..., tuple[int, str, str]]


@pytest.fixture(scope="session")
def crd_catalog() -> CrdCatalog:
    # A missing ../shared/crds fails loudly (CrdCatalog.load raises): never a silent skip.
    return CrdCatalog.load(shared_crd_dir(REPO_ROOT))


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> CliRunner:
    """Run `podserve ARGS...` through the real entry point; returns (code, stdout, stderr)."""

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run
