"""The models of this process: discovery, background loading, states, unload."""

from podserve.repository.discovery import discover_models
from podserve.repository.repository import ModelEntry, ModelRepository, ModelState

__all__ = ["ModelEntry", "ModelRepository", "ModelState", "discover_models"]
