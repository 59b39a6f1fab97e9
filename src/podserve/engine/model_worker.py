"""One loaded model version: its bounded queue, its batch policy, its worker threads.

Everything here runs on the event loop; what runs on a worker thread is
`engine/batch_run.py`. The flow of a request:

    infer() ── admission (queue bound, rows, deadline) ──▶ policy queue
    _pump()  ── policy.next_batch() ──▶ worker thread: preprocess → predict → postprocess
                                         (BatchRunner.run)
    _complete() ── per-request futures ──▶ infer() returns or raises

A request alone in the worker pumps at once; one that arrives while others are in flight
pumps at the end of the loop's turn, so the turn's arrivals share a model call
(`engine/turn_coalescing.py`).

While every instance is busy, `_pump` also stages one batch per instance that can no
longer grow (`policy.next_full_batch()`): the thread starts it the moment its current
call returns, instead of idling until the event loop has heard of the completion and
pumped, which under load takes milliseconds a batch (measured: the model thread idled 6%
of the time on heavy-mlp at concurrency 64).

A cancelled `infer()` (client gone) leaves the queue at once, or, when its batch is
staged, is skipped when the batch starts; a request whose deadline passes while queued or
staged is failed and never computed.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from dataclasses import dataclass
from functools import partial

from podserve.admission import DrainRateEstimator, QueuePressure
from podserve.batching import BatchPolicy, BatchPolicyConfig
from podserve.config.model_config import ModelConfig
from podserve.core.clock import Clock
from podserve.core.errors import (
    DeadlineExceeded,
    DeviceError,
    InferenceFailed,
    InvalidInput,
    PodserveError,
    Unavailable,
)
from podserve.core.tensors import InferRequest, InferResponse, TensorSpec
from podserve.core.triton import ModelStatistics
from podserve.engine.batch_run import Batch, BatchRun, BatchRunner, Pending
from podserve.engine.request_state import RequestState, RequestTrack
from podserve.engine.stats import StatsRecorder
from podserve.engine.threads import WorkerThreads
from podserve.engine.turn_coalescing import TurnCoalescing
from podserve.obs.metrics import ModelMetrics
from podserve.runtimes.base import ModelAPI
from podserve.runtimes.batch_call import Outcome
from podserve.runtimes.batch_dimension import shared_rows

log = logging.getLogger("podserve.engine")


@dataclass(frozen=True, slots=True)
class WorkerLimits:
    max_queue: int
    max_batch_time_s: float
    ready_high_watermark: float = 0.9
    ready_low_watermark: float = 0.5


class ModelWorker:
    def __init__(
        self,
        *,
        config: ModelConfig,
        model: ModelAPI,
        limits: WorkerLimits,
        metrics: ModelMetrics,
        clock: Clock,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.name = config.name
        self.version = config.version
        self.model = model
        self.limits = limits
        self._metrics = metrics
        self._clock = clock
        self._loop = loop
        batching = config.batching
        self.batching_enabled = batching.enabled and model.supports_batching
        self._policy: BatchPolicy[int] = BatchPolicy(
            BatchPolicyConfig(
                max_batch_size=batching.max_batch_size,
                preferred_batch_sizes=tuple(batching.preferred_batch_sizes),
                max_queue_delay_s=batching.max_queue_delay_ms / 1000.0,
                work_conserving=batching.work_conserving,
                enabled=self.batching_enabled,
            )
        )
        self._threads = WorkerThreads(config.name, config.instance_count, clock, loop)
        self._pending: dict[int, Pending] = {}  # queued in the policy
        self._dispatched: dict[int, tuple[Pending, Batch]] = {}  # handed to a thread
        self._batches: list[Batch] = []  # handed to a thread, not completed: running + staged
        self._next_key = 0
        self._wake: asyncio.TimerHandle | None = None
        self._coalescing = TurnCoalescing(
            loop, self._pump, lambda: len(self._policy), lambda: self._idle
        )
        self._inflight = 0
        self._idle_event = asyncio.Event()
        self._idle_event.set()
        self._drain_rate = DrainRateEstimator(clock)
        self._pressure = QueuePressure(limits.ready_high_watermark, limits.ready_low_watermark)
        self.last_device_error: str | None = None
        self.stats = StatsRecorder()  # Triton-style statistics (engine/stats.py)
        # Serialises the moves of staged requests between the loop (abandon, expire) and
        # the worker thread (start); uncontended except at a batch's start.
        self._moves = threading.Lock()
        self._runner = BatchRunner(
            name=config.name,
            model=model,
            metrics=metrics,
            clock=clock,
            loop=loop,
            moves=self._moves,
            queue_changed=self._queue_changed,
        )

    # --- state the lifecycle and metrics read ----------------------------------------
    @property
    def queue_depth(self) -> int:
        """Requests waiting: queued, or in a staged batch that has not started."""
        staged = sum(
            p.track.state is RequestState.STAGED
            for b in self._batches
            if b.staged and not b.started
            for p in b.items
        )
        return len(self._policy) + staged

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def saturated(self) -> bool:
        return self._pressure.saturated

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return self.model.inputs

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return self.model.outputs

    @property
    def dynamic_batching(self) -> bool:
        return self.batching_enabled

    @property
    def generator(self) -> None:
        return None  # takes tensors; text generation is another worker's

    def statistics(self) -> ModelStatistics:
        return self.stats.snapshot(self.name, self.version)

    def longest_busy_s(self) -> float:
        return self._threads.longest_busy_s()

    def wedged(self) -> bool:
        return self._threads.longest_busy_s() > self.limits.max_batch_time_s

    def retry_after_s(self) -> int:
        return self._drain_rate.retry_after_s(self.queue_depth)

    async def wait_idle(self) -> None:
        await self._idle_event.wait()

    def close(self) -> None:
        # Called off the loop after `wait_idle` (repository.py): nothing is queued, so no
        # put-off pump is pending, and a loop handle is not cancelled from this thread.
        self._threads.stop()
        self.model.unload()

    # --- the request path --------------------------------------------------------------
    async def infer(self, request: InferRequest) -> InferResponse:
        rows = self._admit(request)
        key = self._next_key
        self._next_key += 1
        now = self._clock.now_s()
        track = RequestTrack(enqueued_s=now, deadline_s=request.deadline_s)
        pending = Pending(key, request, self._loop.create_future(), rows, track)
        self._arm_expiry(pending, now)
        self._pending[key] = pending
        self._policy.add(key, rows, now)
        self._inflight += 1
        self._idle_event.clear()
        self._queue_changed()
        if self._inflight > 1:  # others in flight: let this turn's arrivals join the batch
            self._coalescing.request()
        else:
            self._pump()
        try:
            response = await pending.future
        except asyncio.CancelledError:
            # The caller went away: a queued request leaves the queue now; a running one
            # finishes on its thread and its result is dropped.
            self._abandon(key)
            raise
        except PodserveError:
            self.stats.record_request(False, self._clock.now_s() - now)
            raise
        else:
            self.stats.record_request(True, self._clock.now_s() - now)
            return response
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._idle_event.set()

    def _admit(self, request: InferRequest) -> int:
        """Refuse early and clearly; return the rows the request adds to a batch."""
        self.model.validate(request)
        if self.batching_enabled:
            # Batched requests are concatenated input by input: inputs whose batch sizes
            # differ would hand a neighbour's rows to this request's answer, and this
            # request's to theirs (runtimes/batch_dimension.py).
            rows = shared_rows(((t.name, t.data) for t in request.inputs), self.name)
        else:
            rows = _rows_of(request)
        limit = self._policy.limit_rows
        if self.batching_enabled and rows > limit:
            raise InvalidInput(
                f"request has {rows} rows; model {self.name!r} accepts at most "
                f"max_batch_size={limit} rows per request"
            )
        if self.queue_depth >= self.limits.max_queue:
            self._coalescing.flush()  # a dispatch put off to the turn's end: do it first
        if self.queue_depth >= self.limits.max_queue:
            raise Unavailable(
                f"model {self.name!r} queue is full ({self.limits.max_queue} waiting); "
                "retry later or on another replica",
                reason="queue_full",
                retry_after_s=self.retry_after_s(),
            )
        if request.deadline_s is not None and self._clock.now_s() >= request.deadline_s:
            raise DeadlineExceeded("request deadline passed before it was queued; not computed")
        return max(rows, 1)

    def _arm_expiry(self, pending: Pending, now: float) -> None:
        if pending.track.deadline_s is not None:
            delay_s = max(pending.track.deadline_s - now, 0.001)
            pending.expiry = self._loop.call_later(delay_s, self._expire, pending.key)

    def _expire(self, key: int) -> None:
        now = self._clock.now_s()
        dispatched = self._dispatched.get(key)
        waiting = dispatched[0] if dispatched is not None else self._pending.get(key)
        if waiting is not None and waiting.track.state.waiting and not waiting.track.overdue(now):
            # Fired early (uvloop keeps timers in whole ms): arm again, or it never expires.
            self._arm_expiry(waiting, now)
            return
        if dispatched is not None:
            pending, job = dispatched
            if not job.staged:
                return  # on an idle thread: it checks the deadline when it starts
            with self._moves:  # the thread may be starting this batch right now
                if not pending.track.expire(now):
                    return  # started first: it is computing, its result stands
        else:
            queued = self._pending.pop(key, None)
            if queued is None or not self._policy.remove(key):
                return
            pending = queued
            if not pending.track.expire(now):
                return
        self._queue_changed()
        if not pending.future.done():
            waited_ms = pending.track.waited_s(now) * 1000
            pending.future.set_exception(
                DeadlineExceeded(
                    f"request deadline passed after {waited_ms:.0f} ms in the queue; not computed"
                )
            )

    def _abandon(self, key: int) -> None:
        dispatched = self._dispatched.get(key)
        if dispatched is not None:
            with self._moves:  # a staged request leaves; a running one finishes, dropped
                dispatched[0].track.abandon()
            self._queue_changed()
            return
        pending = self._pending.pop(key, None)
        if pending is not None and self._policy.remove(key):
            pending.track.abandon()
            if pending.expiry is not None:
                pending.expiry.cancel()
            self._queue_changed()

    def _queue_changed(self) -> None:
        self._pressure.update(self.queue_depth / self.limits.max_queue)

    # --- scheduling ------------------------------------------------------------------
    @property
    def _idle(self) -> int:
        return max(0, self._threads.count - len(self._batches))

    def _pump(self) -> None:
        now = self._clock.now_s()
        while self._idle > 0:
            keys = self._policy.next_batch(now, self._idle)
            if keys is None:
                break
            self._dispatch(keys, staged=False)
        # one staged batch per instance, and only one that waiting could not grow
        while len(self._batches) < 2 * self._threads.count:
            keys = self._policy.next_full_batch()
            if keys is None:
                break
            self._dispatch(keys, staged=True)
        self._queue_changed()
        self._arm_wake()

    def _dispatch(self, keys: list[int], *, staged: bool) -> None:
        batch = []
        for key in keys:
            pending = self._pending.pop(key)
            # a staged request can still expire before its batch starts (`_expire`);
            # `_complete` cancels the timers that remain
            if pending.expiry is not None and not staged:
                pending.expiry.cancel()
            if not pending.future.done():
                pending.track.stage()
                batch.append(pending)
        if not batch:
            return
        job = Batch(batch, staged)
        for pending in batch:
            self._dispatched[pending.key] = (pending, job)
        self._batches.append(job)
        self._threads.submit(partial(self._runner.run, job), partial(self._complete, job))

    def _arm_wake(self) -> None:
        """Wake up when the oldest request's delay expires. Only with an idle worker:
        while all are busy, the next completion pumps anyway, and a timer would spin."""
        wake_at = self._policy.wake_at_s()
        if self._wake is not None:
            self._wake.cancel()
            self._wake = None
        if wake_at is not None and self._idle > 0:
            delay = max(0.0, wake_at - self._clock.now_s())
            self._wake = self._loop.call_later(delay, self._pump)

    def _complete(self, job: Batch, run: BatchRun | None, error: BaseException | None) -> None:
        self._batches.remove(job)
        batch = job.items
        for pending in batch:
            del self._dispatched[pending.key]
            if pending.expiry is not None:
                pending.expiry.cancel()
        outcomes: list[Outcome | None]
        if run is None or error is not None:
            log.error("model call crashed", extra={"model": self.name}, exc_info=error)
            outcomes = [InferenceFailed(f"model {self.name!r} failed: {error}")] * len(batch)
        else:
            outcomes = run.outcomes
            if run.rows:
                compute_s = run.finished_s - run.started_s
                self._metrics.compute_duration.observe(compute_s)
                self._metrics.batch_size.observe(run.rows)
                done = [
                    p
                    for p, outcome in zip(batch, outcomes, strict=True)
                    if outcome is not None and not isinstance(outcome, PodserveError)
                ]
                self.stats.record_batch(
                    rows=run.rows,
                    started=run.requests,
                    succeeded=len(done),
                    succeeded_rows=sum(p.rows for p in done),
                    queue_s=run.queue_s,
                    phases_s=(run.phases.preprocess, run.phases.predict, run.phases.postprocess),
                )
        self._drain_rate.record_completions(len(batch))
        device_failed = False
        for pending, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, DeviceError):
                device_failed = True
                self.last_device_error = outcome.message
            if pending.track.state is RequestState.RUNNING:
                pending.track.finish()
            if pending.future.done() or outcome is None:
                continue
            if isinstance(outcome, PodserveError):
                pending.future.set_exception(outcome)
            else:
                pending.future.set_result(
                    InferResponse(
                        model_name=self.name,
                        model_version=self.version,
                        id=pending.request.id,
                        outputs=outcome,
                    )
                )
        if not device_failed:
            self.last_device_error = None
        self._pump()


def _rows_of(request: InferRequest) -> int:
    """Rows of a request to a model that does not batch: its first input's first
    dimension (its inputs need not agree; each request is computed alone)."""
    for tensor in request.inputs:
        return int(tensor.data.shape[0]) if tensor.data.ndim else 1
    return 1
