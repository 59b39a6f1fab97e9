"""The messages of the continuous-batching scheduler: requests, what a step runs, what it made.

Token counts only: the scheduler never sees token ids, tensors or text. The executor keeps
each request's ids (prompt + generated) and feeds `ids[start : start + num_tokens]`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RequestStatus(enum.IntEnum):
    """Ordered like vLLM's: every status from FINISHED_STOPPED on is final."""

    WAITING = 0
    RUNNING = 1
    PREEMPTED = 2
    FINISHED_STOPPED = 3
    FINISHED_LENGTH = 4
    FINISHED_ABORTED = 5

    @property
    def is_finished(self) -> bool:
        return self >= RequestStatus.FINISHED_STOPPED


@dataclass(slots=True)
class SequenceRequest:
    """One generation request, owned by the scheduler once added (it updates the progress).

    `computed_tokens` counts the tokens whose KV is in the cache, which is also the KV the
    request holds. While decoding that is prompt + generated - 1: the newest sampled token
    gets its KV when it is fed in the next step. Preemption (recompute) resets it to 0 and
    keeps `generated_tokens`, so the request re-prefills prompt + generated.
    """

    request_id: str
    prompt_tokens: int
    max_new_tokens: int
    arrival: int = -1  # set by Scheduler.add: a counter, so order and not time
    status: RequestStatus = RequestStatus.WAITING
    computed_tokens: int = 0
    generated_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """The tokens of the sequence so far: prompt plus generated."""
        return self.prompt_tokens + self.generated_tokens

    @property
    def pending_tokens(self) -> int:
        """Tokens not yet fed to the model: 1 while decoding, more while (re-)prefilling."""
        return self.total_tokens - self.computed_tokens

    @property
    def is_decoding(self) -> bool:
        return self.status is RequestStatus.RUNNING and self.pending_tokens == 1


@dataclass(frozen=True, slots=True)
class ScheduledChunk:
    """Feed tokens [start, start + num_tokens) of the request's sequence this step.

    `samples` is True when the chunk reaches the end of the sequence, so the step yields
    a new token for it; a partial prefill chunk only fills the KV cache.
    """

    request_id: str
    start: int
    num_tokens: int
    samples: bool


@dataclass(frozen=True, slots=True)
class SchedulerOutput:
    """One step: the chunks to run (decodes first), and who was preempted (drop their KV)."""

    chunks: tuple[ScheduledChunk, ...]
    preempted: tuple[str, ...] = ()

    @property
    def num_tokens(self) -> int:
        return sum(chunk.num_tokens for chunk in self.chunks)

    @property
    def is_empty(self) -> bool:
        return not self.chunks


@dataclass(frozen=True, slots=True)
class SequenceOutput:
    """What the step made for one request: `num_new_tokens` sampled (0 for a partial prefill,
    1 otherwise); `stopped` when the last one was EOS or completed a stop string."""

    request_id: str
    num_new_tokens: int = 1
    stopped: bool = False


@dataclass(frozen=True, slots=True)
class StepResult:
    outputs: tuple[SequenceOutput, ...]


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """A request that left the scheduler in `update` (STOPPED or LENGTH) or `abort`."""

    request_id: str
    status: RequestStatus
    generated_tokens: int
