"""The data plane's public surface is what the edges and in-process callers (consume/)
may use, and nothing else: no repository, settings, metrics or lifecycle to reach into."""

from __future__ import annotations

import podserve.dataplane as dataplane
from podserve.dataplane import DataPlane, DataPlaneAPI


def test_the_package_exports_a_sorted_surface_that_exists() -> None:
    assert dataplane.__all__ == sorted(dataplane.__all__)
    for name in dataplane.__all__:
        assert hasattr(dataplane, name), name


def test_internals_are_not_public_attributes() -> None:
    public = {name for name in vars(DataPlane) if not name.startswith("_")}
    for internal in ("repository", "settings", "metrics", "lifecycle", "payloads"):
        assert internal not in public
    # a method per operation, typed requests in, typed results out
    for operation in (
        "infer",
        "generate",
        "check_model",
        "model_metadata",
        "model_config",
        "model_statistics",
        "repository_index",
        "load_model",
        "unload_model",
        "record_request",
        "metrics_exposition",
        "begin_drain",
        "drain",
    ):
        assert callable(getattr(DataPlane, operation)), operation


def _conforms(plane: DataPlane) -> DataPlaneAPI:
    return plane  # mypy checks the concrete data plane implements the protocol
