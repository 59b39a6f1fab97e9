"""The seam every served model sits behind: the `Worker` protocol.

A loaded model is a tensor worker (`ModelWorker`: the dynamic batcher over a runtime) or
a text engine's (`generation.served.EngineWorker` over any registered engine's client).
The lifecycle (probes), the repository (LRU, unload) and Triton's extensions read only
what this protocol names, so a new kind of worker (a vLLM engine on a GPU, a remote
OpenAI-compatible upstream) is one new class, never one more `isinstance` branch.

Generation is a capability, not a subclass: `generator` is the worker's text-generation
client (`generation.client.EngineClient`), or None for a model that takes tensors. A
tensor request to a generative worker is refused by its own `infer`.

The protocol is structural: implementations need not import it (`generation/` sits
beside `engine/` in the layers and cannot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from podserve.core.tensors import InferRequest, InferResponse, TensorSpec
from podserve.core.triton import ModelStatistics

if TYPE_CHECKING:
    from podserve.generation.client import EngineClient


class WorkerLimitsView(Protocol):
    """The limits the lifecycle reads: queue bound and the watchdog's batch limit."""

    @property
    def max_queue(self) -> int: ...

    @property
    def max_batch_time_s(self) -> float: ...


class Worker(Protocol):
    """One loaded model version, whatever computes it."""

    @property
    def name(self) -> str: ...

    @property
    def version(self) -> str: ...

    @property
    def limits(self) -> WorkerLimitsView: ...

    @property
    def inflight(self) -> int:
        """Requests (or sequences) admitted and not finished."""
        ...

    @property
    def queue_depth(self) -> int:
        """Admitted requests waiting to run."""
        ...

    @property
    def saturated(self) -> bool:
        """Readiness pressure: the queue is above its high watermark."""
        ...

    @property
    def last_device_error(self) -> str | None: ...

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        """Declared OIP tensor metadata; empty for a text-generation model."""
        ...

    @property
    def outputs(self) -> tuple[TensorSpec, ...]: ...

    @property
    def dynamic_batching(self) -> bool:
        """Whether requests are batched together by the dynamic batcher."""
        ...

    @property
    def generator(self) -> EngineClient | None:
        """The text-generation client, or None for a tensor model."""
        ...

    def longest_busy_s(self) -> float:
        """The watchdog's heartbeat: how long the oldest running call has run."""
        ...

    def statistics(self) -> ModelStatistics:
        """Triton's statistics extension for this model (zeros where not counted)."""
        ...

    async def infer(self, request: InferRequest) -> InferResponse:
        """Run one tensor request. Cancelling the awaiting task removes a queued request
        from the queue at once (the data plane's cancellation contract)."""
        ...

    async def wait_idle(self) -> None: ...

    def close(self) -> None: ...
