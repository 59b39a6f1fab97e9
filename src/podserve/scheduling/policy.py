"""Queue policies: who is admitted next, and who is preempted when the KV cache is full.

A new policy (priority, shortest-prompt-first) is a new class with the same three
methods, not an `if` in the scheduler.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from typing import Protocol

from podserve.scheduling.types import SequenceRequest


class QueuePolicy(Protocol):
    def push(self, request: SequenceRequest) -> None:
        """Queue a new arrival."""
        ...

    def push_preempted(self, request: SequenceRequest) -> None:
        """Queue a preempted request, ahead of those that never ran."""
        ...

    def peek(self) -> SequenceRequest | None:
        """The request to admit next, left in the queue."""
        ...

    def pop(self) -> SequenceRequest:
        """Remove and return what `peek` returns."""
        ...

    def remove(self, request_id: str) -> SequenceRequest | None: ...

    def victim(self, running: Sequence[SequenceRequest]) -> SequenceRequest:
        """The running request to preempt (`running` is in admission order, non-empty)."""
        ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[SequenceRequest]: ...


class FcfsPolicy:
    """First come, first served (vLLM's default): arrivals queue at the back, preempted
    requests go back to the front, and the most recently admitted request is the victim."""

    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: deque[SequenceRequest] = deque()

    def push(self, request: SequenceRequest) -> None:
        self._queue.append(request)

    def push_preempted(self, request: SequenceRequest) -> None:
        self._queue.appendleft(request)

    def peek(self) -> SequenceRequest | None:
        return self._queue[0] if self._queue else None

    def pop(self) -> SequenceRequest:
        return self._queue.popleft()

    def remove(self, request_id: str) -> SequenceRequest | None:
        for request in self._queue:
            if request.request_id == request_id:
                self._queue.remove(request)
                return request
        return None

    def victim(self, running: Sequence[SequenceRequest]) -> SequenceRequest:
        return running[-1]

    def __len__(self) -> int:
        return len(self._queue)

    def __iter__(self) -> Iterator[SequenceRequest]:
        return iter(self._queue)
