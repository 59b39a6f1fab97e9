"""The contract between the edges (REST, gRPC) and the data plane.

Every method raises only `podserve.core.errors` exceptions; the edges map them to
status codes. `infer` does admission, drain accounting, deadlines and metrics itself,
so both edges get identical behaviour.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from podserve.core.tensors import InferRequest, InferResponse
from podserve.core.triton import ModelStatistics
from podserve.dataplane.types import (
    HealthReport,
    ModelConfigView,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)


class DataPlaneAPI(Protocol):
    def live(self) -> HealthReport: ...
    def ready(self) -> HealthReport: ...
    def startup(self) -> HealthReport: ...
    def server_metadata(self) -> ServerMetadata: ...
    def model_ready(self, name: str, version: str | None = None) -> bool:
        """True when loaded and serving; raises ModelNotFound for an unknown name."""
        ...

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata: ...
    async def infer(
        self,
        request: InferRequest,
        *,
        endpoint: str,
        disconnected: asyncio.Event | None = None,
    ) -> InferResponse:
        """Run one request. `disconnected` is set by the edge when the client goes away;
        the request is then cancelled (dropped if queued) and `Cancelled` is raised."""
        ...

    def model_config(self, name: str, version: str | None = None) -> ModelConfigView:
        """Triton's model-configuration extension; raises ModelNotFound."""
        ...

    def model_statistics(
        self, name: str | None = None, version: str | None = None
    ) -> list[ModelStatistics]:
        """Triton's statistics extension: one model's, or every loaded model's."""
        ...

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]: ...
    async def load_model(self, name: str) -> None: ...
    async def unload_model(self, name: str) -> None: ...
