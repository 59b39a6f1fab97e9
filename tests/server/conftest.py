"""The server's behaviour through a real `podserve serve` process (subprocess, real
sockets, real signals): every test here is marked `e2e`."""

from __future__ import annotations

from pathlib import Path

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here):
            item.add_marker(pytest.mark.e2e)
