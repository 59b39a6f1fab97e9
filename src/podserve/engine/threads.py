"""Daemon worker threads that run model calls off the event loop (`WorkerThreads`).

Not a ThreadPoolExecutor: its threads are joined at interpreter exit, so one wedged model
call (a hung device, say) would keep the process from ever exiting after a drain. Daemon
threads let the process exit; the watchdog reports the wedge through /healthz.

Each thread records when its current call started, which is the watchdog's heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from podserve.core.clock import Clock

log = logging.getLogger("podserve.engine")

Job = Callable[[], Any]
Done = Callable[[Any, BaseException | None], None]


class WorkerThreads:
    def __init__(
        self, name: str, count: int, clock: Clock, loop: asyncio.AbstractEventLoop
    ) -> None:
        self._clock = clock
        self._loop = loop
        self._jobs: queue.SimpleQueue[tuple[Job, Done] | None] = queue.SimpleQueue()
        self._busy_since_s: list[float | None] = [None] * count
        self._threads = [
            threading.Thread(target=self._run, args=(i,), name=f"podserve-{name}-{i}", daemon=True)
            for i in range(count)
        ]
        for thread in self._threads:
            thread.start()

    @property
    def count(self) -> int:
        return len(self._threads)

    def submit(self, job: Job, done: Done) -> None:
        """Run `job` on a worker; `done(result, error)` is then called on the event loop."""
        self._jobs.put((job, done))

    def longest_busy_s(self) -> float:
        """How long the oldest running call has been running (0 when all are idle)."""
        now = self._clock.now_s()
        started = [s for s in self._busy_since_s if s is not None]
        return now - min(started) if started else 0.0

    def stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _run(self, index: int) -> None:
        while True:
            item = self._jobs.get()
            if item is None:
                return
            job, done = item
            self._busy_since_s[index] = self._clock.now_s()
            result: Any = None
            error: BaseException | None = None
            try:
                result = job()
            except BaseException as exc:  # handed to the loop, which owns error handling
                error = exc
            finally:
                self._busy_since_s[index] = None
            try:
                self._loop.call_soon_threadsafe(done, result, error)
            except RuntimeError:
                # The loop closed while this call ran (process exiting): nobody waits.
                log.debug("event loop closed before a model call finished")
            # Let the finished call go now, not when the next one arrives: its requests'
            # inputs may be views of a client's shared-memory region, which stays mapped
            # while they live.
            del item, job, done, result, error
