"""The consume loop: claim what dead consumers left, read new entries, run each through
the data plane, write its result and acknowledge it.

    loop: (every claim interval) XAUTOCLAIM idle entries → XREADGROUP up to the free
          slots → one task per entry: process → result + XACK (one Lua script)
    stop: stop reading; the entries already claimed run to their results and acks

Up to `max_inflight` entries run at once, so a model's dynamic batcher sees them together
and batches them as it batches concurrent HTTP requests. A failure worth retrying (500,
503) is counted and the entry left pending: after `claim_idle_ms` it is claimed again,
by this consumer or another, until `max_failures`, when it goes to the dead-letter stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from redis.exceptions import RedisError

from podserve.consume.contract import StreamEntry
from podserve.consume.metrics import ConsumerMetrics
from podserve.consume.processor import RETRYABLE_STATUSES, process
from podserve.consume.streams import RedisStreams, Write
from podserve.consume.writer import ResultWriter
from podserve.core.clock import MONOTONIC, Clock
from podserve.dataplane import DataPlaneAPI

log = logging.getLogger("podserve.consume")

NEVER_DEAD_LETTER = 2**53  # a failure count Lua's numbers still hold exactly


@dataclass(frozen=True, slots=True)
class ConsumerPolicy:
    read_count: int = 8  # entries asked for per XREADGROUP
    max_inflight: int = 16  # entries processed at once
    block_ms: int = 1000  # longest XREADGROUP wait: also the longest reaction to SIGTERM
    # A pending entry idle this long is claimed; entries in flight are touched every half
    # of it (plus up to one block_ms), so keep it well above 2 * block_ms.
    claim_idle_ms: int = 30_000
    max_failures: int = 3  # 0: never dead-letter (retry for ever; lint warns)
    state_interval_s: float = 1.0  # lag/pending gauges refresh

    def __post_init__(self) -> None:
        if self.read_count < 1 or self.max_inflight < 1:
            raise ValueError("read_count and max_inflight must be at least 1")
        if self.max_failures < 0:
            raise ValueError("max_failures must be 0 (never dead-letter) or more")
        if self.claim_idle_ms < 1 or self.block_ms < 1:
            raise ValueError("claim_idle_ms and block_ms must be at least 1")

    @property
    def claim_interval_s(self) -> float:
        # Twice per idle timeout: an abandoned entry waits at most 1.5 timeouts.
        return self.claim_idle_ms / 2000


class Consumer:
    def __init__(
        self,
        dataplane: DataPlaneAPI,
        streams: RedisStreams,
        policy: ConsumerPolicy,
        metrics: ConsumerMetrics,
        clock: Clock = MONOTONIC,
    ) -> None:
        self._dataplane = dataplane
        self._streams = streams
        self._policy = policy
        self._metrics = metrics
        self._clock = clock
        self._stopping = asyncio.Event()
        self._tasks: dict[asyncio.Task[None], StreamEntry] = {}
        self._running: set[str] = set()  # the entry ids of _tasks
        self._writer = ResultWriter(streams)
        self._warned_groups = False
        # Read at scrape time: setting it on every entry's start and end cost a lock each.
        metrics.inflight.set_function(lambda: len(self._tasks))

    @property
    def inflight(self) -> int:
        return len(self._tasks)

    def stop(self) -> None:
        """Stop reading; `run` returns once the entries already claimed are answered."""
        self._stopping.set()

    async def run(self) -> None:
        policy = self._policy
        await self._streams.ensure_group()
        self._writer.start()
        try:
            await self._loop(policy)
        finally:
            await self._writer.close()

    async def _loop(self, policy: ConsumerPolicy) -> None:
        next_claim_s = next_state_s = self._clock.now_s()
        while not self._stopping.is_set():
            now = self._clock.now_s()
            if now >= next_state_s:
                await self._refresh_state()
                next_state_s = now + policy.state_interval_s
            free = policy.max_inflight - len(self._tasks)
            try:
                if now >= next_claim_s:
                    next_claim_s = now + policy.claim_interval_s
                    # Our own entries in flight are not idle, however long their model
                    # takes: reset their idle time so no consumer (this one included)
                    # claims and runs them a second time.
                    await self._streams.touch([e.entry_id for e in self._tasks.values()])
                    claimed = []
                    if free > 0:
                        claimed = await self._streams.claim_idle(policy.claim_idle_ms, free)
                    if claimed:
                        self._metrics.claimed.inc(len(claimed))
                        log.info("claimed idle entries", extra={"entries": len(claimed)})
                        self._start(claimed)
                        continue
                if free <= 0:
                    await asyncio.wait(
                        self._tasks, timeout=policy.block_ms / 1000, return_when="FIRST_COMPLETED"
                    )
                    continue
                want = min(policy.read_count, free)
                entries = await self._streams.read_new(want, policy.block_ms)
                if self._tasks and 0 < len(entries) < want:  # busy: a wave, not a lone entry
                    entries += await self._rest_of_wave(want - len(entries))
            except RedisError as exc:
                # Redis restarting or unreachable: what is in flight keeps its pending
                # entries; wait a block and try again rather than exit and lose the batch.
                log.warning("redis error; retrying", extra={"error": str(exc)})
                await asyncio.sleep(policy.block_ms / 1000)
                continue
            self._start(entries)
        if self._tasks:
            log.info(
                "stopped reading; finishing claimed entries", extra={"inflight": len(self._tasks)}
            )
        while self._tasks:
            await asyncio.wait(self._tasks, timeout=policy.claim_interval_s)
            if self._tasks:  # still ours while they finish: keep them from being claimed
                with contextlib.suppress(RedisError):
                    await self._streams.touch([e.entry_id for e in self._tasks.values()])

    async def _rest_of_wave(self, count: int) -> list[StreamEntry]:
        """The entries that landed while a blocked read was being answered, read at once
        (no BLOCK). Redis answers a blocked XREADGROUP as soon as an XADD makes the stream
        ready (redis/redis src/server.c processCommand calls handleClientsBlockedOnKeys()
        after a command), so the producers of one wave, each on its own connection, wake
        the consumer with the first entry or few; the rest came one read later, as a
        second model call. The HTTP edge reads every connection that became readable in
        one loop turn. Measured in benchmarks/consume.py (iris, c=32): rows per model
        call 7.4 to 8.1 without this read, 10.0 to 10.2 with it (HTTP: 8.9 to 9.9). Only
        while entries are in flight: an idle consumer starts a lone entry without the
        extra round trip."""
        try:
            return await self._streams.read_new(count, None)
        except RedisError:
            return []  # what the first read got still runs; a lost reply's entries are claimed

    def _start(self, entries: list[StreamEntry]) -> None:
        running = self._running
        for entry in entries:
            if entry.entry_id in running:
                continue  # claimed back while it runs here: it will be answered once
            task = asyncio.ensure_future(self._handle(entry))
            self._tasks[task] = entry
            running.add(entry.entry_id)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        entry = self._tasks.pop(task, None)
        if entry is not None:
            self._running.discard(entry.entry_id)

    async def _handle(self, entry: StreamEntry) -> None:
        metrics = self._metrics
        result = await process(self._dataplane, entry)
        try:
            if result.status in RETRYABLE_STATUSES:
                limit = self._policy.max_failures or NEVER_DEAD_LETTER
                count = await self._writer.submit(Write(entry, result, limit))
                if count > 0:
                    metrics.failed.labels(entry.model).inc()
                    log.warning(
                        "entry failed; left pending for another try",
                        extra={"request_id": entry.request_id, "failures": count},
                    )
                    return
                metrics.dead_lettered.labels(entry.model).inc()
                log.error(
                    "entry dead-lettered",
                    extra={"request_id": entry.request_id, "failures": -count},
                )
            elif not await self._writer.submit(Write(entry, result)):
                metrics.duplicates.inc()
        except RedisError as exc:
            # Not acknowledged: the entry stays pending and is claimed again later.
            log.warning(
                "could not write the result; the entry stays pending",
                extra={"request_id": entry.request_id, "error": str(exc)},
            )
            return
        # Wall clock: the entry id's timestamp is Redis' wall clock (see metrics.py).
        latency_s = max(0.0, time.time() - entry.enqueued_ms / 1000)
        metrics.answered(entry.model, result.status, latency_s)

    async def _refresh_state(self) -> None:
        try:
            state = await self._streams.group_state()
        except RedisError:
            return
        if state is not None:
            retention = self._streams.names.retention
            if state.groups > 1 and retention.delete_acknowledged and not self._warned_groups:
                self._warned_groups = True
                log.warning(
                    "another group reads the request stream: acknowledged entries are kept, "
                    "not deleted (--keep-acknowledged says so and silences this)",
                    extra={"groups": state.groups},
                )
            self._metrics.pending.set(state.pending)
            if state.lag is not None:
                self._metrics.lag.set(state.lag)
