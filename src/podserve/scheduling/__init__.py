"""Continuous batching for generative models: a pure, token-counting scheduler (DESIGN.md §4).

No torch, no I/O, no asyncio: the engine owns the model and the loop and calls
`schedule()` → run the chunks → `update()` each step.
"""

from podserve.scheduling.policy import FcfsPolicy, QueuePolicy
from podserve.scheduling.scheduler import Scheduler, SchedulerConfig
from podserve.scheduling.types import (
    FinishedRequest,
    RequestStatus,
    ScheduledChunk,
    SchedulerOutput,
    SequenceOutput,
    SequenceRequest,
    StepResult,
)

__all__ = [
    "FcfsPolicy",
    "FinishedRequest",
    "QueuePolicy",
    "RequestStatus",
    "ScheduledChunk",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerOutput",
    "SequenceOutput",
    "SequenceRequest",
    "StepResult",
]
