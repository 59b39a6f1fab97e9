"""One batch on a worker thread: the model worker's only code off the event loop.

A batch handed to a thread may be staged: it waits behind a busy instance (or for an idle
one to pick it up), and meanwhile the loop may abandon or expire its requests. When the
thread starts it, `BatchRunner.run` starts every request that still waits, under the
worker's lock on those moves, and skips the rest: an abandoned request is answered by
nobody, an expired one with DeadlineExceeded, neither is computed. The rest go to the
model in one call (`runtimes/batch_call.run_batch`), and what the thread reports
(`BatchRun`) goes back to the loop, which answers the requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

from podserve.core.clock import Clock
from podserve.core.errors import DeadlineExceeded, DeviceError, PodserveError
from podserve.core.tensors import InferRequest, InferResponse
from podserve.engine.request_state import RequestState, RequestTrack
from podserve.obs.metrics import ModelMetrics
from podserve.runtimes.base import ModelAPI
from podserve.runtimes.batch_call import Outcome, PhaseTimes, run_batch


@dataclass(slots=True, eq=False)
class Pending:
    key: int
    request: InferRequest
    future: asyncio.Future[InferResponse]
    rows: int
    track: RequestTrack  # QUEUED → STAGED → RUNNING → DONE | EXPIRED | ABANDONED
    expiry: asyncio.TimerHandle | None = None


@dataclass(slots=True, eq=False)
class Batch:
    items: list[Pending]
    # Staged behind a busy instance (not handed to an idle one). Until the worker thread
    # starts it, its requests still wait: they count in the queue depth and against the
    # queue bound, and their deadlines still apply.
    staged: bool
    started: bool = False


@dataclass(frozen=True, slots=True)
class BatchRun:
    """What a worker thread reports for one batch."""

    started_s: float
    finished_s: float
    outcomes: list[Outcome | None]  # None: abandoned before the batch started
    rows: int  # rows actually computed
    requests: int  # requests actually computed
    queue_s: float  # their waits before the batch started, summed
    phases: PhaseTimes  # preprocess, predict, postprocess


class BatchRunner:
    """Runs a model worker's batches on its threads. `moves` is the worker's lock on the
    moves of staged requests (the loop abandons or expires them, this starts them);
    `queue_changed` is the worker's readiness-pressure update, run on `loop`."""

    def __init__(
        self,
        *,
        name: str,
        model: ModelAPI,
        metrics: ModelMetrics,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
        moves: threading.Lock,
        queue_changed: Callable[[], None],
    ) -> None:
        self._name = name
        self._model = model
        self._metrics = metrics
        self._clock = clock
        self._loop = loop
        self._moves = moves
        self._queue_changed = queue_changed

    def run(self, job: Batch) -> BatchRun:
        batch = job.items
        started = self._clock.now_s()
        outcomes: list[Outcome | None] = [None] * len(batch)
        run: list[int] = []
        queue_s = 0.0
        with self._moves:  # against the loop abandoning or expiring a staged request
            job.started = True
            starts = [pending.track.start(started) for pending in batch]
        if job.staged:  # its requests stop waiting: let the readiness pressure know now
            with contextlib.suppress(RuntimeError):  # the loop closed: the process exits
                self._loop.call_soon_threadsafe(self._queue_changed)
        for i, (pending, starting) in enumerate(zip(batch, starts, strict=True)):
            waited_s = pending.track.waited_s(started)
            if not starting:
                if pending.track.state is RequestState.EXPIRED:
                    outcomes[i] = DeadlineExceeded(
                        f"request deadline passed after {waited_s * 1000:.0f} ms waiting for "
                        "the model; not computed"
                    )
                continue  # abandoned: nobody waits for it
            run.append(i)
            self._metrics.queue_wait.observe(waited_s)
            queue_s += waited_s
        phases = PhaseTimes()
        if run:
            results = run_batch(
                self._model,
                [batch[i].request for i in run],
                name=self._name,
                on_error=self._count_error,
                times=phases,
            )
            for i, outcome in zip(run, results, strict=True):
                outcomes[i] = outcome
        rows = sum(batch[i].rows for i in run)
        finished = self._clock.now_s()
        return BatchRun(started, finished, outcomes, rows, len(run), queue_s, phases)

    def _count_error(self, error: PodserveError) -> None:
        if isinstance(error, DeviceError):
            self._metrics.device_errors.inc()
