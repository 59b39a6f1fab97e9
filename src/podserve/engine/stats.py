"""Per-model inference statistics in Triton's shape (`GET /v2/models/{m}/stats`,
gRPC `ModelStatistics`): cumulative counts and nanoseconds, as Triton's clients and
perf_analyzer read them.

Updated on the event loop only (the model worker's `infer` and `_complete`), so no lock.
What is counted:

- success / fail: requests that reached the queue, by outcome, with the time from
  admission to their answer. Requests refused at admission (a full queue, a bad input)
  never reached the model and are not counted here; `/metrics` counts them by reason.
- queue: per request that reached a model call, its wait from admission until the call.
- compute_input / compute_infer / compute_output: per request that got a result, the
  preprocess / predict / postprocess time of the batch it was part of.
- inference_count (rows) and execution_count (calls) count successes, as in Triton.
- batch_stats: per batch size (in rows), the successful model calls and their duration.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from podserve.core.triton import BatchStatistics, Duration, ModelStatistics

__all__ = ["BatchStatistics", "Duration", "ModelStatistics", "StatsRecorder"]


@dataclass(slots=True)
class StatsRecorder:
    _success: Duration = field(default_factory=Duration)
    _fail: Duration = field(default_factory=Duration)
    _queue: Duration = field(default_factory=Duration)
    _input: Duration = field(default_factory=Duration)
    _compute: Duration = field(default_factory=Duration)
    _output: Duration = field(default_factory=Duration)
    _batches: dict[int, tuple[Duration, Duration, Duration]] = field(default_factory=dict)
    _inferences: int = 0
    _executions: int = 0
    _last_ms: int = 0

    def record_request(self, ok: bool, seconds: float) -> None:
        (self._success if ok else self._fail).add(seconds)

    def record_batch(
        self,
        *,
        rows: int,
        started: int,
        succeeded: int,
        succeeded_rows: int,
        queue_s: float,
        phases_s: tuple[float, float, float],
    ) -> None:
        """One model call over `rows` rows from `started` requests, which waited `queue_s`
        seconds in total before it started and then spent `phases_s` (preprocess,
        predict, postprocess) in it; `succeeded` of them (`succeeded_rows` rows) got a
        result. As in Triton, inference and execution counts are successful ones."""
        self._queue.count += started
        self._queue.ns += int(queue_s * 1e9)
        if not succeeded:
            return
        self._inferences += succeeded_rows
        self._executions += 1
        self._last_ms = int(time.time() * 1000)
        pre, predict, post = phases_s
        self._input.add(pre, succeeded)
        self._compute.add(predict, succeeded)
        self._output.add(post, succeeded)
        batch = self._batches.setdefault(rows, (Duration(), Duration(), Duration()))
        for duration, seconds in zip(batch, phases_s, strict=True):
            duration.add(seconds)

    def snapshot(self, name: str, version: str) -> ModelStatistics:
        def copy(d: Duration) -> Duration:
            return Duration(d.count, d.ns)

        return ModelStatistics(
            name=name,
            version=version,
            last_inference_ms=self._last_ms,
            inference_count=self._inferences,
            execution_count=self._executions,
            success=copy(self._success),
            fail=copy(self._fail),
            queue=copy(self._queue),
            compute_infer=copy(self._compute),
            compute_input=copy(self._input),
            compute_output=copy(self._output),
            batches=tuple(
                BatchStatistics(size, copy(infer), copy(pre), copy(post))
                for size, (pre, infer, post) in sorted(self._batches.items())
            ),
        )
