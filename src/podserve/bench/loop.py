"""The two ways to offer load, one step (one concurrency or one rate) at a time.

Closed loop: N workers, each with its own keep-alive connection, send the next request
as soon as the previous one answered, so N requests are always in flight.

Open loop: requests arrive on a schedule (Poisson, bursty gamma, or constant gaps) at a
given rate, whether or not earlier ones have answered. Latency is measured from the
*scheduled* arrival, so a client or server that falls behind shows up as latency instead
of being hidden (coordinated omission); how late each request actually left is kept as
the client's send lag.

Both warm up first (requests started during warm-up are not recorded), then measure for
a duration or a request count.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from podserve.bench.client import ConnectionClosed, HttpConnection, RequestTimeout, open_connection
from podserve.bench.records import (
    CONNECT_ERROR,
    CONNECTION_CLOSED,
    PROTOCOL_ERROR,
    STREAM_INCOMPLETE,
    TIMEOUT,
    Recorder,
    StepColumns,
)
from podserve.bench.sse import TokenStreamMeter
from podserve.bench.wire import ProtocolError
from podserve.bench.workloads import PreparedRequest, Target

Arrival = Literal["poisson", "bursty", "constant"]


@dataclass(frozen=True, slots=True)
class Budget:
    """How long each step runs: `duration_s`, or exactly `requests` measured requests."""

    duration_s: float | None = 10.0
    requests: int | None = None
    warmup_s: float = 1.0
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        if (self.duration_s is None) == (self.requests is None):
            raise ValueError("give exactly one of a duration or a request count")


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    concurrency: int

    @property
    def level(self) -> float:
        return float(self.concurrency)

    def describe(self) -> str:
        return f"concurrency {self.concurrency}"


@dataclass(frozen=True, slots=True)
class OpenLoop:
    rate_rps: float
    arrival: Arrival = "poisson"
    # Shape of the gamma distribution of gaps for bursty arrivals: below 1 is burstier
    # than Poisson (1 is Poisson), as in vLLM's `--burstiness`.
    burstiness: float = 0.5
    max_connections: int = 1024
    seed: int = 0

    @property
    def level(self) -> float:
        return self.rate_rps

    def describe(self) -> str:
        return f"rate {self.rate_rps:g} req/s ({self.arrival})"

    def gaps_s(self, rng: np.random.Generator, size: int) -> Sequence[float]:
        mean_gap_s = 1.0 / self.rate_rps
        if self.arrival == "constant":
            return [mean_gap_s] * size
        if self.arrival == "poisson":
            gaps: list[float] = rng.exponential(mean_gap_s, size=size).tolist()
            return gaps
        shape = self.burstiness
        bursty: list[float] = rng.gamma(shape, mean_gap_s / shape, size=size).tolist()
        return bursty


LoadLevel = ClosedLoop | OpenLoop


@dataclass(slots=True)
class LiveStep:
    """What a step is doing right now; the progress display reads it."""

    level: LoadLevel
    budget: Budget
    recorder: Recorder = field(default_factory=Recorder)
    phase: Literal["warmup", "measure", "drain", "done"] = "warmup"
    measure_start_s: float = math.inf
    in_flight: int = 0


async def run_step(
    target: Target,
    requests: Sequence[PreparedRequest],
    level: LoadLevel,
    budget: Budget,
    live: LiveStep | None = None,
) -> StepColumns:
    """Offer one level of load and return what was measured."""
    if not requests:
        raise ValueError("no requests to send")
    live = live or LiveStep(level, budget)
    cpu_start_s = time.process_time()
    wall_start_s = time.perf_counter()
    if isinstance(level, ClosedLoop):
        await _run_closed(target, requests, level, budget, live)
    else:
        await _run_open(target, requests, level, budget, live)
    live.phase = "done"
    cpu_fraction = (time.process_time() - cpu_start_s) / max(
        time.perf_counter() - wall_start_s, 1e-9
    )
    columns = live.recorder.columns(0.0, cpu_fraction)
    if not columns.count:
        return columns
    # The window runs from the first measured start to the last measured answer.
    first_start_s = float(columns.start_s.min())
    last_end_s = float((columns.start_s + columns.latency_s).max())
    return dataclasses.replace(columns, window_s=max(last_end_s - first_start_s, 1e-9))


async def _send(
    conn: HttpConnection, request: PreparedRequest, timeout_s: float
) -> tuple[int, TokenStreamMeter | None]:
    """Status (or a negative outcome code) and, for streams, the token timings."""
    meter = TokenStreamMeter() if request.stream else None
    try:
        response = await conn.request(
            request.raw, sink=meter.feed if meter else None, timeout_s=timeout_s
        )
    except RequestTimeout:
        return TIMEOUT, meter
    except (ConnectionClosed, ConnectionError):
        return CONNECTION_CLOSED, meter
    except (ProtocolError, ValueError):
        # ValueError: an SSE event that is not JSON.
        conn.close()
        return PROTOCOL_ERROR, meter
    status = response.status
    if meter is not None and 200 <= status < 300 and not meter.done:
        return STREAM_INCOMPLETE, meter
    return status, meter


def _record(
    recorder: Recorder, start_s: float, status: int, meter: TokenStreamMeter | None
) -> None:
    end_s = time.perf_counter()
    if meter is None:
        recorder.add(start_s, end_s, status)
        return
    times = meter.token_times_s
    recorder.add(
        start_s,
        end_s,
        status,
        ttft_s=times[0] - start_s if times else math.nan,
        token_times_s=times,
        output_tokens=meter.output_tokens,
    )


async def _run_closed(
    target: Target,
    requests: Sequence[PreparedRequest],
    level: ClosedLoop,
    budget: Budget,
    live: LiveStep,
) -> None:
    recorder = live.recorder
    n_requests = len(requests)
    timeout_s = budget.timeout_s
    start_s = time.perf_counter()
    measure_start_s = start_s + budget.warmup_s
    end_s = measure_start_s + budget.duration_s if budget.duration_s is not None else math.inf
    live.measure_start_s = measure_start_s
    # Shared by all workers: measured requests still to issue in request-count mode.
    remaining = [budget.requests if budget.requests is not None else -1]

    async def worker(index: int) -> None:
        conn: HttpConnection | None = None
        position = index
        try:
            while True:
                now = time.perf_counter()
                if now >= end_s:
                    return
                measured = now >= measure_start_s
                if measured:
                    live.phase = "measure"
                    if remaining[0] == 0:
                        return
                    if remaining[0] > 0:
                        remaining[0] -= 1
                request = requests[position % n_requests]
                position += level.concurrency
                live.in_flight += 1
                try:
                    if conn is None or conn.closed:
                        try:
                            conn = await open_connection(target.host, target.port)
                        except OSError:
                            conn = None
                            if measured:
                                recorder.add(now, time.perf_counter(), CONNECT_ERROR)
                            continue
                    status, meter = await _send(conn, request, timeout_s)
                    if measured:
                        _record(recorder, now, status, meter)
                finally:
                    live.in_flight -= 1
        finally:
            if conn is not None:
                conn.close()

    await asyncio.gather(*(worker(i) for i in range(level.concurrency)))
    live.phase = "drain"


async def _run_open(
    target: Target,
    requests: Sequence[PreparedRequest],
    level: OpenLoop,
    budget: Budget,
    live: LiveStep,
) -> None:
    recorder = live.recorder
    loop = asyncio.get_running_loop()
    rng = np.random.default_rng(level.seed)
    slots = asyncio.Semaphore(level.max_connections)
    idle: list[HttpConnection] = []
    opened: list[HttpConnection] = []
    tasks: set[asyncio.Task[None]] = set()
    timeout_s = budget.timeout_s

    async def one(request: PreparedRequest, scheduled_s: float, measured: bool) -> None:
        live.in_flight += 1
        try:
            async with slots:
                conn = idle.pop() if idle else None
                if conn is None or conn.closed:
                    try:
                        conn = await open_connection(target.host, target.port)
                    except OSError:
                        if measured:
                            recorder.add(scheduled_s, time.perf_counter(), CONNECT_ERROR)
                        return
                    opened.append(conn)
                if measured:
                    recorder.add_send_lag(time.perf_counter() - scheduled_s)
                status, meter = await _send(conn, request, timeout_s)
                if not conn.closed:
                    idle.append(conn)
            if measured:
                _record(recorder, scheduled_s, status, meter)
        finally:
            live.in_flight -= 1

    start_s = time.perf_counter()
    measure_start_s = start_s + budget.warmup_s
    end_s = measure_start_s + budget.duration_s if budget.duration_s is not None else math.inf
    live.measure_start_s = measure_start_s
    to_issue = budget.requests if budget.requests is not None else -1
    scheduled_s = start_s
    position = 0
    try:
        while True:
            for gap_s in level.gaps_s(rng, 1024):
                scheduled_s += gap_s
                if scheduled_s >= end_s or to_issue == 0:
                    break
                measured = scheduled_s >= measure_start_s
                if measured:
                    live.phase = "measure"
                    if to_issue > 0:
                        to_issue -= 1
                delay_s = scheduled_s - time.perf_counter()
                if delay_s > 0:
                    await asyncio.sleep(delay_s)
                task = loop.create_task(
                    one(requests[position % len(requests)], scheduled_s, measured)
                )
                position += 1
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            else:
                continue
            break
        live.phase = "drain"
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        for conn in opened:
            conn.close()
