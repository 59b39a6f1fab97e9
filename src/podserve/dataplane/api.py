"""The data plane's public surface, as a protocol: what every edge (REST, gRPC, the
stream consumer, a test double) may call. `DataPlane` implements it.

Every method raises only `podserve.core.errors` exceptions; the edges map them to status
codes once. Cancellation is task cancellation (see `CallContext`).
"""

from __future__ import annotations

from typing import Protocol

from podserve.admission.reservations import Reservation
from podserve.core.tensors import InferRequest, InferResponse
from podserve.core.triton import ModelStatistics
from podserve.dataplane.types import (
    CallContext,
    GenerateRequest,
    Generation,
    HealthReport,
    ModelConfigView,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)
from podserve.shm import CudaSharedMemory, SystemSharedMemory


class DataPlaneAPI(Protocol):
    # Triton's shared-memory extensions: the regions the edges' codecs read and write.
    shared_memory: SystemSharedMemory
    cuda_shared_memory: CudaSharedMemory

    def live(self) -> HealthReport: ...
    def ready(self) -> HealthReport: ...
    def startup(self) -> HealthReport: ...
    def server_metadata(self) -> ServerMetadata: ...
    def check_model(self, name: str, version: str | None = None) -> None:
        """Raise ModelNotFound for an unknown model or version."""
        ...

    def is_generative(self, name: str, version: str | None = None) -> bool:
        """Whether the model generates text; raises ModelNotFound for an unknown name."""
        ...

    def model_ready(self, name: str, version: str | None = None) -> bool:
        """True when loaded and serving; raises ModelNotFound for an unknown name."""
        ...

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata: ...
    def served_model_names(self) -> list[str]: ...
    def refuse_early(self, name: str, version: str | None = None) -> None:
        """Raise now what `infer` would raise anyway for a draining server, an unknown
        model or a full queue, before the edge decodes the request."""
        ...

    def admit_early(self, name: str, version: str | None = None) -> Reservation | None:
        """`refuse_early`, and for a request it lets by, a promised queue slot to pass as
        `CallContext.reservation` to `infer` and to release on every other path (twice
        is a no-op): requests arriving while it is decoded see the slot as taken."""
        ...

    async def infer(self, request: InferRequest, call: CallContext = ...) -> InferResponse:
        """Run one tensor request: drain, deadline, admission, accounting included."""
        ...

    async def generate(self, request: GenerateRequest, call: CallContext = ...) -> Generation:
        """Admit a generation request (all sequences or none) before returning."""
        ...

    def record_request(self, model: str, endpoint: str, code: str, duration_s: float) -> None:
        """Count one finished request by its final status."""
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
    async def load_model(self, name: str, call: CallContext | None = None) -> None:
        """Load a model; an edge passes its call (checked against the model-control
        mode and admin token), None is the process itself."""
        ...

    async def unload_model(self, name: str, call: CallContext | None = None) -> None: ...
