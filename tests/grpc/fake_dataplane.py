"""A test double of the data plane, for testing the gRPC edge on its own.

`FakeDataPlane` implements `podserve.dataplane.api.DataPlaneAPI` with a few scripted
models so the edge's decoding, encoding, error mapping, deadlines and disconnect
handling can be tested against the real grpc.aio server and the real tritonclient,
without admission, batching or runtimes. It is not the data plane: the end-to-end tests
against the real one live elsewhere.

Models:
- "echo": returns every input unchanged (or only the requested outputs, by input name).
- "double": returns every input doubled (numbers * 2, BYTES repeated twice, BOOL as is).
- "wait": never finishes by itself; it records when its task is cancelled, the data
  plane's one cancellation contract.
Any model raises `fail_with` when the test sets it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import numpy as np

from podserve.admission.reservations import Reservation
from podserve.core.errors import InvalidInput, ModelNotFound
from podserve.core.tensors import Datatype, InferRequest, InferResponse, Tensor, TensorSpec
from podserve.core.triton import BatchStatistics, Duration, ModelConfigView, ModelStatistics
from podserve.dataplane.types import (
    CallContext,
    GenerateRequest,
    Generation,
    HealthReport,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)
from podserve.shm import CudaSharedMemory, SystemSharedMemory

MODELS = ("echo", "double", "wait")
_NO_CALL = CallContext()


@dataclass
class FakeDataPlane:
    live_ok: bool = True
    ready_ok: bool = True
    # When set, every infer call raises it instead of answering.
    fail_with: BaseException | None = None
    # Repository state by model name; "wait" starts unloaded so load/unload have work.
    states: dict[str, str] = field(
        default_factory=lambda: {"echo": "READY", "double": "READY", "wait": "UNAVAILABLE"}
    )
    # Records, for assertions.
    requests: list[InferRequest] = field(default_factory=list)
    endpoints: list[str] = field(default_factory=list)
    calls: list[CallContext] = field(default_factory=list)
    recorded: list[tuple[str, str, str]] = field(default_factory=list)
    loads: list[str] = field(default_factory=list)
    unloads: list[str] = field(default_factory=list)
    # Set when a "wait" request has reached the data plane / has been cancelled.
    wait_started: asyncio.Event = field(default_factory=asyncio.Event)
    disconnect_seen: asyncio.Event = field(default_factory=asyncio.Event)
    response_parameters: dict[str, object] = field(default_factory=dict)
    # Triton's shared-memory extensions: the real table, on /dev/shm.
    shared_memory: SystemSharedMemory = field(default_factory=SystemSharedMemory)
    cuda_shared_memory: CudaSharedMemory = field(init=False)

    def __post_init__(self) -> None:
        self.cuda_shared_memory = CudaSharedMemory(self.shared_memory)

    # ---------------------------------------------------------------- health and metadata

    def live(self) -> HealthReport:
        return HealthReport(ok=self.live_ok, state="READY" if self.live_ok else "WEDGED")

    def ready(self) -> HealthReport:
        reasons = () if self.ready_ok else ("draining",)
        return HealthReport(ok=self.ready_ok, state="READY", reasons=reasons)

    def startup(self) -> HealthReport:
        return HealthReport(ok=True, state="READY")

    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata(name="podserve", version="0.1.0", extensions=("model_repository",))

    def _known(self, name: str) -> None:
        if name not in self.states:
            raise ModelNotFound(f"model {name!r} is unknown")

    def check_model(self, name: str, version: str | None = None) -> None:
        self._known(name)

    def served_model_names(self) -> list[str]:
        return sorted(n for n, state in self.states.items() if state == "READY")

    def record_request(self, model: str, endpoint: str, code: str, duration_s: float) -> None:
        self.recorded.append((model, endpoint, code))

    async def generate(self, request: GenerateRequest, call: CallContext = _NO_CALL) -> Generation:
        raise InvalidInput("the fake data plane generates no text")

    def is_generative(self, name: str, version: str | None = None) -> bool:
        self._known(name)
        return False

    def model_ready(self, name: str, version: str | None = None) -> bool:
        self._known(name)
        return self.states[name] == "READY"

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        self._known(name)
        return ModelMetadata(
            name=name,
            versions=("1",),
            platform="fake",
            inputs=(TensorSpec("INPUT0", Datatype.FP32, (-1, 4)),),
            outputs=(TensorSpec("OUTPUT0", Datatype.FP32, (-1, 4)),),
        )

    def model_config(self, name: str, version: str | None = None) -> ModelConfigView:
        self._known(name)
        return ModelConfigView(
            name=name,
            version="1",
            platform="fake",
            backend="fake",
            max_batch_size=8,
            inputs=(TensorSpec("x", Datatype.FP32, (-1, 3)),),
            outputs=(TensorSpec("y", Datatype.FP32, (-1,)),),
            dynamic_batching=True,
            preferred_batch_sizes=(4, 8),
            max_queue_delay_us=0,
            instance_count=1,
            parameters={"scale": "2"},
        )

    def model_statistics(
        self, name: str | None = None, version: str | None = None
    ) -> list[ModelStatistics]:
        """Scripted: "double" served 5 requests in one batch of 4 rows and one of 1."""
        if name:
            self._known(name)
        names = [name] if name else ["double", "echo"]
        return [
            ModelStatistics(
                name=n,
                version="1",
                last_inference_ms=1_700_000_000_000,
                inference_count=5 if n == "double" else 0,
                execution_count=2 if n == "double" else 0,
                success=Duration(5, 5000) if n == "double" else Duration(),
                fail=Duration(),
                queue=Duration(5, 100) if n == "double" else Duration(),
                compute_infer=Duration(5, 900) if n == "double" else Duration(),
                batches=(BatchStatistics(4, Duration(1, 700)),) if n == "double" else (),
            )
            for n in names
        ]

    # ---------------------------------------------------------------- inference

    async def infer(self, request: InferRequest, call: CallContext = _NO_CALL) -> InferResponse:
        self.requests.append(request)
        self.endpoints.append(call.endpoint)
        self.calls.append(call)
        if self.fail_with is not None:
            raise self.fail_with
        self._known(request.model_name)
        if request.model_name == "wait":
            return await self._wait()
        inputs = request.input_map()
        outputs = [self._compute(request.model_name, t) for t in request.inputs]
        if request.outputs:
            unknown = [o.name for o in request.outputs if o.name not in inputs]
            if unknown:
                raise InvalidInput(f"unknown requested outputs: {unknown}")
            wanted = [o.name for o in request.outputs]
            outputs = [t for t in outputs if t.name in wanted]
        return InferResponse(
            model_name=request.model_name,
            model_version="1",
            outputs=tuple(outputs),
            id=request.id,
            parameters=dict(self.response_parameters),
        )

    async def _wait(self) -> InferResponse:
        self.wait_started.set()
        try:
            await asyncio.Event().wait()  # only cancellation ends it
        except asyncio.CancelledError:
            self.disconnect_seen.set()
            raise
        raise AssertionError("unreachable")

    @staticmethod
    def _compute(model: str, tensor: Tensor) -> Tensor:
        if model == "echo" or tensor.datatype is Datatype.BOOL:
            return tensor
        if tensor.datatype is Datatype.BYTES:
            doubled = np.empty(tensor.data.shape, dtype=object)
            for index, item in np.ndenumerate(tensor.data):
                doubled[index] = item + item
            return Tensor(tensor.name, tensor.datatype, doubled)
        data = (tensor.data * 2).astype(tensor.datatype.numpy_dtype)
        return Tensor(tensor.name, tensor.datatype, data)

    # ---------------------------------------------------------------- repository

    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        return [
            RepositoryEntry(name=name, version="1", state=state)
            for name, state in sorted(self.states.items())
            if not ready_only or state == "READY"
        ]

    def refuse_early(self, name: str, version: str | None = None) -> None:
        """The fake has no queues and no drain: it never refuses early."""

    def admit_early(self, name: str, version: str | None = None) -> Reservation | None:
        """No queues, so no slot to promise (as for a generative model)."""
        return None

    async def load_model(self, name: str, call: CallContext | None = None) -> None:
        self._known(name)
        self.loads.append(name)
        self.states[name] = "READY"

    async def unload_model(self, name: str, call: CallContext | None = None) -> None:
        self._known(name)
        self.unloads.append(name)
        self.states[name] = "UNAVAILABLE"
