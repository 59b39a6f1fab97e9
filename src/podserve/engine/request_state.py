"""One tensor request's life in the model worker, as an explicit state machine (pure:
time is an argument, no I/O, no asyncio).

    QUEUED ──stage──▶ STAGED ──start──▶ RUNNING ──finish──▶ DONE
       │                 │       │
       │                 │       └─(deadline passed at start)──▶ EXPIRED
       ├──expire─────────┴──────────────────────────────────────▶ EXPIRED
       └──abandon────────┴──────────────────────────────────────▶ ABANDONED

- QUEUED: admitted, in the batch policy's queue.
- STAGED: in a batch handed to a worker thread that has not started it (behind a busy
  instance, or about to start on an idle one). It still waits: its deadline still
  applies and a client that leaves still takes it out.
- RUNNING: its batch started and it is being computed; the result stands, whatever
  happens to the client (it is dropped if nobody waits).
- DONE, EXPIRED (never computed: its deadline passed first), ABANDONED (never computed:
  its client left first) are final.

An illegal move raises `InvalidTransition`: a bug, never a client's doing. The worker
moves a STAGED request from two threads (the loop abandons or expires it, the worker
thread starts it) and serialises those moves with its own lock; this module only
decides what a move means.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RequestState(enum.Enum):
    QUEUED = "queued"
    STAGED = "staged"
    RUNNING = "running"
    DONE = "done"
    EXPIRED = "expired"
    ABANDONED = "abandoned"

    @property
    def waiting(self) -> bool:
        return self in (RequestState.QUEUED, RequestState.STAGED)

    @property
    def final(self) -> bool:
        return self in (RequestState.DONE, RequestState.EXPIRED, RequestState.ABANDONED)


_MOVES: dict[RequestState, frozenset[RequestState]] = {
    RequestState.QUEUED: frozenset(
        {RequestState.STAGED, RequestState.EXPIRED, RequestState.ABANDONED}
    ),
    RequestState.STAGED: frozenset(
        {RequestState.RUNNING, RequestState.EXPIRED, RequestState.ABANDONED}
    ),
    RequestState.RUNNING: frozenset({RequestState.DONE}),
    RequestState.DONE: frozenset(),
    RequestState.EXPIRED: frozenset(),
    RequestState.ABANDONED: frozenset(),
}


class InvalidTransition(RuntimeError):
    """A request was moved in a way its state machine does not allow (a bug)."""


@dataclass(slots=True, eq=False)
class RequestTrack:
    """Where one request is in its life; `enqueued_s` and `deadline_s` on the worker's
    clock (`deadline_s` None: no deadline)."""

    enqueued_s: float
    deadline_s: float | None = None
    state: RequestState = RequestState.QUEUED

    def _move(self, to: RequestState) -> None:
        if to not in _MOVES[self.state]:
            raise InvalidTransition(f"a {self.state.value} request cannot become {to.value}")
        self.state = to

    def overdue(self, now_s: float) -> bool:
        return self.deadline_s is not None and now_s >= self.deadline_s

    def stage(self) -> None:
        """Its batch was handed to a worker thread."""
        self._move(RequestState.STAGED)

    def start(self, now_s: float) -> bool:
        """Its batch starts: True if it is to be computed. A request whose deadline has
        passed expires instead; one that left, or expired meanwhile, is skipped."""
        if self.state.final:
            return False
        if self.overdue(now_s):
            self._move(RequestState.EXPIRED)
            return False
        self._move(RequestState.RUNNING)
        return True

    def expire(self, now_s: float) -> bool:
        """Its deadline timer fired: True if it expired now (it was still waiting)."""
        if not self.state.waiting or not self.overdue(now_s):
            return False
        self._move(RequestState.EXPIRED)
        return True

    def abandon(self) -> bool:
        """Its client left: True if it leaves without being computed; False when it is
        running already (or over), whose result is then dropped."""
        if not self.state.waiting:
            return False
        self._move(RequestState.ABANDONED)
        return True

    def finish(self) -> None:
        self._move(RequestState.DONE)

    def waited_s(self, now_s: float) -> float:
        return now_s - self.enqueued_s
