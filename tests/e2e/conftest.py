"""One real server for the end-to-end client tests: the bundled example repository plus
a fake model, HTTP and gRPC on free ports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.server import ServerProcess, wait_until, write_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    extra = tmp_path_factory.mktemp("models")
    echo = write_model(
        extra, "echo", batching={"max_batch_size": 16}, parameters={"fail_value": 666}
    )
    lazy = write_model(extra, "lazy", preload=False)
    with ServerProcess(
        "--model-repository",
        str(ROOT / "examples" / "models"),
        "--model",
        f"echo={echo}",
        "--model",
        f"lazy={lazy}",
        # the repository API's load/unload (tritonclient's load_model) need it
        "--model-control-mode",
        "explicit",
        grpc=True,
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=60, what="ready")
        yield process


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test here runs a real `podserve serve` process: mark it `e2e`."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
