"""Process state and what each probe means (DESIGN.md §2).

    STARTING → LOADING → READY ⇄ DEGRADED → DRAINING → STOPPED

- startup: every preload model is loaded and warmed up.
- live: no worker is wedged (a batch running past its model's max_batch_time_s) and, while
  loading, a load started or finished within `load_stall_timeout_s`. Never depends on load
  or on a downstream: a slow but progressing server is alive.
- ready: started, not draining, no model queue above its high watermark (hysteresis in the
  engine), no device error on the last call, and no preload model failed.

This module also counts requests in flight across every edge, which is what the SIGTERM
drain waits on.
"""

from __future__ import annotations

import asyncio
import enum

from podserve.core.clock import Clock
from podserve.core.health import HealthReport
from podserve.repository import ModelRepository, ModelState


class State(enum.StrEnum):
    STARTING = "STARTING"
    LOADING = "LOADING"
    READY = "READY"
    DEGRADED = "DEGRADED"
    DRAINING = "DRAINING"
    STOPPED = "STOPPED"


class Lifecycle:
    def __init__(
        self, repository: ModelRepository, clock: Clock, *, load_stall_timeout_s: float
    ) -> None:
        self._repository = repository
        self._clock = clock
        self._load_stall_timeout_s = load_stall_timeout_s
        self._loading_done = False
        self.draining = False
        self.stopped = False
        self.inflight = 0
        self._empty = asyncio.Event()
        self._empty.set()

    # --- transitions ---------------------------------------------------------------
    def loading_finished(self) -> None:
        self._loading_done = True

    def begin_drain(self) -> None:
        self.draining = True

    def stop(self) -> None:
        self.stopped = True

    # --- in-flight accounting --------------------------------------------------------
    def request_started(self) -> None:
        self.inflight += 1
        self._empty.clear()

    def request_finished(self) -> None:
        self.inflight -= 1
        if self.inflight == 0:
            self._empty.set()

    async def wait_empty(self) -> None:
        await self._empty.wait()

    # --- state and probes -------------------------------------------------------------
    @property
    def state(self) -> State:
        if self.stopped:
            return State.STOPPED
        if self.draining:
            return State.DRAINING
        if not self._loading_done:
            entries = self._repository.entries()
            return (
                State.LOADING
                if any(e.state is ModelState.LOADING for e in entries)
                else State.STARTING
            )
        return State.DEGRADED if self._readiness_problems() else State.READY

    def startup(self) -> HealthReport:
        preload = [e for e in self._repository.entries() if e.config.preload]
        loaded = [e.name for e in preload if e.state is ModelState.READY]
        loading = [e.name for e in preload if e.state is ModelState.LOADING]
        failed = {e.name: e.error or "failed" for e in preload if e.state is ModelState.FAILED}
        done = self._loading_done and len(loaded) == len(preload)
        reasons = [f"model {n!r} failed to load: {err}" for n, err in failed.items()]
        if not done and not failed:
            reasons.append("models are still loading")
        return HealthReport(
            ok=done,
            state=self.state.value,
            reasons=tuple(reasons),
            details={
                "progress": f"{len(loaded)}/{len(preload)}",
                "loaded": loaded,
                "loading": loading,
                "failed": failed,
            },
        )

    def live(self) -> HealthReport:
        reasons = []
        for worker in self._repository.workers():
            busy_s = worker.longest_busy_s()
            if busy_s > worker.limits.max_batch_time_s:
                reasons.append(
                    f"model {worker.name!r}: a batch has run {busy_s:.1f}s, over its "
                    f"max_batch_time_s={worker.limits.max_batch_time_s:g}; worker is wedged"
                )
        if not self._loading_done:
            stalled_s = self._clock.now_s() - self._repository.last_progress_s
            if stalled_s > self._load_stall_timeout_s:
                reasons.append(
                    f"model loading made no progress for {stalled_s:.0f}s "
                    f"(load_stall_timeout_s={self._load_stall_timeout_s:g})"
                )
        return HealthReport(ok=not reasons, state=self.state.value, reasons=tuple(reasons))

    def ready(self) -> HealthReport:
        reasons = []
        if self.draining:
            reasons.append("draining after SIGTERM")
        if not self._loading_done:
            reasons.append("models are still loading")
        reasons.extend(self._readiness_problems())
        return HealthReport(ok=not reasons, state=self.state.value, reasons=tuple(reasons))

    def _readiness_problems(self) -> list[str]:
        problems = []
        for entry in self._repository.entries():
            if entry.config.preload and entry.state is ModelState.FAILED:
                problems.append(f"model {entry.name!r} failed to load: {entry.error}")
            worker = entry.worker
            if worker is None:
                continue
            if worker.saturated:
                problems.append(
                    f"model {entry.name!r} queue is above its high watermark "
                    f"({worker.queue_depth}/{worker.limits.max_queue})"
                )
            if worker.last_device_error:
                problems.append(
                    f"model {entry.name!r}: last inference hit a device error: "
                    f"{worker.last_device_error}"
                )
        return problems
