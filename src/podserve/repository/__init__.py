"""The models of this process: discovery, background loading, states, unload."""

from podserve.repository.discovery import discover_models
from podserve.repository.repository import (
    LATEST,
    ModelEntry,
    ModelRepository,
    ModelState,
    RepositoryPolicy,
)

__all__ = [
    "LATEST",
    "ModelEntry",
    "ModelRepository",
    "ModelState",
    "RepositoryPolicy",
    "discover_models",
]
