"""A `Worker` whose state the test sets by hand: what the lifecycle and the repository
read, and nothing else. It stands in for a model worker only where the real one would
need a model to reach a state (wedged, saturated, a device error)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from podserve.core.errors import InvalidInput
from podserve.core.tensors import InferRequest, InferResponse, TensorSpec
from podserve.core.triton import Duration, ModelStatistics
from podserve.engine import Worker


@dataclass(frozen=True)
class Limits:
    max_queue: int = 10
    max_batch_time_s: float = 5.0


@dataclass
class StubWorker:
    name: str
    version: str = "1"
    limits: Limits = field(default_factory=Limits)
    inflight: int = 0
    queue_depth: int = 0
    saturated: bool = False
    last_device_error: str | None = None
    busy_s: float = 0.0
    closed: bool = False
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    inputs: tuple[TensorSpec, ...] = ()
    outputs: tuple[TensorSpec, ...] = ()
    dynamic_batching: bool = False
    generator: None = None

    def __post_init__(self) -> None:
        self.idle.set()

    def longest_busy_s(self) -> float:
        return self.busy_s

    def statistics(self) -> ModelStatistics:
        zero = Duration
        return ModelStatistics(self.name, self.version, 0, 0, 0, zero(), zero(), zero(), zero())

    async def infer(self, request: InferRequest) -> InferResponse:
        raise InvalidInput("a stub computes nothing")

    async def wait_idle(self) -> None:
        await self.idle.wait()

    def close(self) -> None:
        self.closed = True


def _conforms(worker: StubWorker) -> Worker:
    return worker  # mypy checks that the stub implements the protocol
