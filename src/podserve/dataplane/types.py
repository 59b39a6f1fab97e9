"""Messages the data plane returns to the edges (REST and gRPC alike)."""

from __future__ import annotations

from dataclasses import dataclass

from podserve.core.health import HealthReport
from podserve.core.tensors import TensorSpec
from podserve.core.triton import ModelConfigView

__all__ = [
    "HealthReport",
    "ModelConfigView",
    "ModelMetadata",
    "RepositoryEntry",
    "ServerMetadata",
]


@dataclass(frozen=True, slots=True)
class ServerMetadata:
    name: str
    version: str
    extensions: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ModelMetadata:
    name: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]


@dataclass(frozen=True, slots=True)
class RepositoryEntry:
    name: str
    version: str
    state: str  # OIP repository states: UNAVAILABLE, LOADING, READY, UNLOADING
    reason: str = ""
