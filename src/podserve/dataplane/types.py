"""Messages the data plane returns to the edges (REST and gRPC alike)."""

from __future__ import annotations

from dataclasses import dataclass, field

from podserve.core.tensors import TensorSpec


@dataclass(frozen=True, slots=True)
class HealthReport:
    """An answer to a probe: ok, and when not, every reason that failed."""

    ok: bool
    state: str
    reasons: tuple[str, ...] = ()
    details: dict[str, object] = field(default_factory=dict)


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
