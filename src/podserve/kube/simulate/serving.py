"""Serving as aggregate accounting, one simulated second at a time (no request objects).

A workload's ready pods share its arrivals evenly (the Service balances them). Each pod
serves up to `concurrency` requests at once, queues up to `maxQueue` more and rejects the
rest with 503, like podserve's admission (DESIGN.md §3). Completions per second are the
busy slots divided by the service time; latency is the service time plus the wait: the
fluid backlog ahead (Little's law) when saturated, else the M/M/c (Erlang C) 99th
percentile of waiting. Every request is counted once: admitted requests end served or cut,
the rest are rejected."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from podserve.kube.simulate.objects import ServingParams

P99_TAIL = 0.01


def erlang_c(servers: int, offered: float) -> float:
    """Probability an arrival waits in an M/M/c queue with `offered` = λ/μ erlangs."""
    if offered <= 0:
        return 0.0
    if offered >= servers:
        return 1.0
    term = 1.0
    total = 1.0
    for k in range(1, servers):
        term *= offered / k
        total += term
    term *= offered / servers
    tail = term * servers / (servers - offered)
    return tail / (total + tail)


@dataclass(slots=True)
class Fleet:
    """The ready pods of one workload, as one pool of slots."""

    params: ServingParams
    in_system: int = 0  # admitted, not finished, on ready pods (running + queued)
    carry: float = 0.0
    occupancy: float = 0.0  # mean requests held over the last second
    last_p99_s: float = 0.0
    _wait_cache: dict[tuple[int, int], float] = field(default_factory=dict)

    def completions(self, in_system: int, slots: int, carry: float) -> tuple[int, float]:
        busy = min(in_system, slots)
        work = busy / self.params.service_s + carry
        done = min(in_system, math.floor(work))
        return done, (work - done if done < in_system else 0.0)

    def step(self, arrivals: int, ready: int) -> tuple[int, int, float]:
        """One second: (served, rejected, p99 latency in seconds; 0 when nothing ran).

        Arrivals and service overlap within the second (a fluid queue): the pods finish up
        to their throughput, what is left waits, and only what exceeds every pod's
        concurrency + maxQueue is rejected."""
        if ready <= 0:
            self.occupancy = 0.0
            return 0, arrivals, 0.0
        p = self.params
        slots = ready * p.concurrency
        limit = ready * (p.concurrency + p.max_queue)
        total = self.in_system + arrivals
        done, self.carry = self.completions(total, slots, self.carry)
        left = total - done
        rejected = max(0, left - limit)
        self.in_system = left - rejected
        # What a gauge scraped at a random instant sees: those still held, plus the slot
        # time of those that finished within the second (Little's law).
        self.occupancy = self.in_system + done * min(p.service_s, 1.0)
        waiting = max(0, self.in_system - slots)
        p99 = self._p99(arrivals - rejected, ready, waiting)
        if p99:
            self.last_p99_s = p99
        return done, rejected, p99

    def _p99(self, admitted: int, ready: int, waiting: int) -> float:
        p = self.params
        if waiting > 0:
            return p.service_p99_s + waiting * p.service_s / (ready * p.concurrency)
        per_pod = admitted / ready
        key = (p.concurrency, round(per_pod * 10))
        wait = self._wait_cache.get(key)
        if wait is None:
            rate = 1.0 / p.service_s
            offered = per_pod / rate
            pw = erlang_c(p.concurrency, offered)
            slack = p.concurrency * rate - per_pod
            wait = math.log(pw / P99_TAIL) / slack if pw > P99_TAIL and slack > 0 else 0.0
            # Steady-state M/M/c overstates a second near saturation; a request can never
            # wait longer than a full queue takes to drain (maxQueue bounds it).
            wait = min(wait, p.max_queue * p.service_s / p.concurrency)
            self._wait_cache[key] = wait
        return p.service_p99_s + wait if admitted else 0.0

    def take_share(self, ready: int) -> int:
        """A pod leaves the endpoints: it keeps its share of what is in flight."""
        if ready <= 0:
            return 0
        share = -(-self.in_system // ready)  # ceil: what rounding leaves goes with the pod
        self.in_system -= share
        return share


def drain_step(params: ServingParams, inflight: int, carry: float) -> tuple[int, float]:
    """Requests a terminating pod finishes in one second, and the fraction carried over."""
    if inflight <= 0:
        return 0, 0.0
    work = min(inflight, params.concurrency) / params.service_s + carry
    done = min(inflight, math.floor(work))
    return done, work - done
