"""One loaded model version: its bounded queue, its batch policy, its worker threads.

Everything here runs on the event loop except `_execute`, which runs on a worker thread.
The flow of a request:

    infer() ── admission (queue bound, rows, deadline) ──▶ policy queue
    _pump()  ── policy.next_batch() ──▶ worker thread: preprocess → predict → postprocess
    _complete() ── per-request futures ──▶ infer() returns or raises

A cancelled `infer()` (client gone) leaves the queue at once; a request whose deadline
passes while queued is failed by a timer and never computed.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any

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
from podserve.core.tensors import InferRequest, InferResponse
from podserve.engine.executor import WorkerThreads
from podserve.obs.metrics import ModelMetrics
from podserve.runtimes.base import ModelAPI
from podserve.runtimes.batch_call import Outcome, run_batch

log = logging.getLogger("podserve.engine")


@dataclass(frozen=True, slots=True)
class WorkerLimits:
    max_queue: int
    max_batch_time_s: float
    ready_high_watermark: float = 0.9
    ready_low_watermark: float = 0.5


@dataclass(slots=True, eq=False)
class _Pending:
    key: int
    request: InferRequest
    future: asyncio.Future[InferResponse]
    rows: int
    enqueued_s: float
    expiry: asyncio.TimerHandle | None = None


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
        self._idle = config.instance_count
        self._pending: dict[int, _Pending] = {}
        self._next_key = 0
        self._wake: asyncio.TimerHandle | None = None
        self._inflight = 0
        self._idle_event = asyncio.Event()
        self._idle_event.set()
        self._drain_rate = DrainRateEstimator(clock)
        self._pressure = QueuePressure(limits.ready_high_watermark, limits.ready_low_watermark)
        self.last_device_error: str | None = None

    # --- state the lifecycle and metrics read ----------------------------------------
    @property
    def queue_depth(self) -> int:
        return len(self._policy)

    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def saturated(self) -> bool:
        return self._pressure.saturated

    def longest_busy_s(self) -> float:
        return self._threads.longest_busy_s()

    def wedged(self) -> bool:
        return self._threads.longest_busy_s() > self.limits.max_batch_time_s

    def retry_after_s(self) -> int:
        return self._drain_rate.retry_after_s(self.queue_depth)

    async def wait_idle(self) -> None:
        await self._idle_event.wait()

    def close(self) -> None:
        self._threads.stop()
        self.model.unload()

    # --- the request path --------------------------------------------------------------
    async def infer(self, request: InferRequest) -> InferResponse:
        rows = self._admit(request)
        key = self._next_key
        self._next_key += 1
        now = self._clock.now_s()
        pending = _Pending(key, request, self._loop.create_future(), rows, now)
        if request.deadline_s is not None:
            pending.expiry = self._loop.call_later(request.deadline_s - now, self._expire, key)
        self._pending[key] = pending
        self._policy.add(key, rows, now)
        self._inflight += 1
        self._idle_event.clear()
        self._metrics.inflight.inc()
        self._queue_changed()
        self._pump()
        try:
            return await pending.future
        except asyncio.CancelledError:
            # The caller went away: a queued request leaves the queue now; a running one
            # finishes on its thread and its result is dropped.
            self._abandon(key)
            raise
        finally:
            self._inflight -= 1
            self._metrics.inflight.dec()
            if self._inflight == 0:
                self._idle_event.set()

    def _admit(self, request: InferRequest) -> int:
        """Refuse early and clearly; return the rows the request adds to a batch."""
        self.model.validate(request)
        rows = _rows_of(request)
        limit = self._policy.limit_rows
        if self.batching_enabled and rows > limit:
            raise InvalidInput(
                f"request has {rows} rows; model {self.name!r} accepts at most "
                f"max_batch_size={limit} rows per request"
            )
        if len(self._policy) >= self.limits.max_queue:
            raise Unavailable(
                f"model {self.name!r} queue is full ({self.limits.max_queue} waiting); "
                "retry later or on another replica",
                reason="queue_full",
                retry_after_s=self.retry_after_s(),
            )
        if request.deadline_s is not None and self._clock.now_s() >= request.deadline_s:
            raise DeadlineExceeded("request deadline passed before it was queued; not computed")
        return max(rows, 1)

    def _expire(self, key: int) -> None:
        pending = self._pending.pop(key, None)
        if pending is None or not self._policy.remove(key):
            return
        self._queue_changed()
        if not pending.future.done():
            waited_ms = (self._clock.now_s() - pending.enqueued_s) * 1000
            pending.future.set_exception(
                DeadlineExceeded(
                    f"request deadline passed after {waited_ms:.0f} ms in the queue; not computed"
                )
            )

    def _abandon(self, key: int) -> None:
        pending = self._pending.pop(key, None)
        if pending is not None and self._policy.remove(key):
            if pending.expiry is not None:
                pending.expiry.cancel()
            self._queue_changed()

    def _queue_changed(self) -> None:
        depth = len(self._policy)
        self._metrics.queue_depth.set(depth)
        self._pressure.update(depth / self.limits.max_queue)

    # --- scheduling ------------------------------------------------------------------
    def _pump(self) -> None:
        now = self._clock.now_s()
        while self._idle > 0:
            keys = self._policy.next_batch(now, self._idle)
            if keys is None:
                break
            batch = []
            for key in keys:
                pending = self._pending.pop(key)
                if pending.expiry is not None:
                    pending.expiry.cancel()
                if not pending.future.done():
                    batch.append(pending)
            if not batch:
                continue
            self._idle -= 1
            for pending in batch:
                self._metrics.queue_wait.observe(now - pending.enqueued_s)
            requests = [p.request for p in batch]
            self._threads.submit(
                partial(self._execute, requests), partial(self._complete, batch, now)
            )
        self._queue_changed()
        self._arm_wake()

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

    def _complete(
        self, batch: list[_Pending], started_s: float, results: Any, error: BaseException | None
    ) -> None:
        self._idle += 1
        now = self._clock.now_s()
        self._metrics.compute_duration.observe(now - started_s)
        self._metrics.batch_size.observe(sum(p.rows for p in batch))
        self._drain_rate.record_completions(len(batch))
        if error is not None:
            log.error("model call crashed", extra={"model": self.name}, exc_info=error)
            results = [InferenceFailed(f"model {self.name!r} failed: {error}")] * len(batch)
        device_failed = False
        for pending, outcome in zip(batch, results, strict=True):
            if isinstance(outcome, DeviceError):
                device_failed = True
                self.last_device_error = outcome.message
            if pending.future.done():
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

    # --- the worker thread -----------------------------------------------------------
    def _execute(self, requests: list[InferRequest]) -> list[Outcome]:
        return run_batch(self.model, requests, name=self.name, on_error=self._count_error)

    def _count_error(self, error: PodserveError) -> None:
        if isinstance(error, DeviceError):
            self._metrics.device_errors.inc()


def _rows_of(request: InferRequest) -> int:
    for tensor in request.inputs:
        return int(tensor.data.shape[0]) if tensor.data.ndim else 1
    return 1
