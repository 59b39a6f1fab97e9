"""The dynamic batch policy on a fake clock: an event-driven simulation of workers that
each take `batch_time_s` per batch, driven by Hypothesis-generated arrivals."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from podserve.batching import BatchPolicy, BatchPolicyConfig
from podserve.core.clock import FakeClock

BATCH_TIME_S = 0.01


@dataclass
class Outcome:
    batches: list[list[int]] = field(default_factory=list)
    waited_s: dict[int, float] = field(default_factory=dict)
    idle_with_eligible_work: list[float] = field(default_factory=list)


def simulate(config: BatchPolicyConfig, workers: int, arrivals: list[tuple[float, int]]) -> Outcome:
    """arrivals: (gap before arrival in s, rows). Returns what was dispatched and when."""
    clock = FakeClock()
    policy: BatchPolicy[int] = BatchPolicy(config)
    outcome = Outcome()
    enqueued: dict[int, float] = {}
    events: list[tuple[float, int, str, int]] = []  # (time, seq, kind, payload)
    seq = 0
    t = 0.0
    for key, (gap, _rows) in enumerate(arrivals):
        t += gap
        heapq.heappush(events, (t, seq, "arrive", key))
        seq += 1
    rows_of = {key: rows for key, (_, rows) in enumerate(arrivals)}
    idle = workers

    def dispatch() -> None:
        nonlocal idle, seq
        while True:
            batch = policy.next_batch(clock.now_s(), idle)
            if batch is None:
                break
            idle -= 1
            outcome.batches.append(batch)
            for key in batch:
                outcome.waited_s[key] = clock.now_s() - enqueued[key]
            heapq.heappush(events, (clock.now_s() + BATCH_TIME_S, seq, "done", 0))
            seq += 1
        wake = policy.wake_at_s()
        # Like the engine: a timer only while a worker is idle (a completion pumps anyway).
        if wake is not None and idle > 0:
            assert wake > clock.now_s()  # an expired delay with an idle worker dispatches
            heapq.heappush(events, (wake, seq, "wake", 0))
            seq += 1
        if idle > 0 and len(policy) > 0 and config.work_conserving:
            outcome.idle_with_eligible_work.append(clock.now_s())

    while events:
        when, _, kind, key = heapq.heappop(events)
        clock.advance(max(0.0, when - clock.now_s()))  # float sums may round past `when`
        if kind == "arrive":
            enqueued[key] = clock.now_s()
            policy.add(key, rows_of[key], clock.now_s())
        elif kind == "done":
            idle += 1
        dispatch()
    return outcome


configs = st.builds(
    lambda max_batch, preferred, delay_ms, conserving: BatchPolicyConfig(
        max_batch_size=max_batch,
        preferred_batch_sizes=tuple(sorted({p for p in preferred if p <= max_batch})),
        max_queue_delay_s=delay_ms / 1000,
        work_conserving=conserving,
    ),
    st.integers(1, 16),
    st.lists(st.integers(1, 16), max_size=3),
    st.sampled_from([0, 1, 5, 20]),
    st.booleans(),
)


@settings(max_examples=300, deadline=None)
@given(
    config=configs,
    workers=st.integers(1, 3),
    arrivals=st.lists(st.tuples(st.floats(0, 0.03), st.integers(1, 4)), min_size=1, max_size=60),
)
def test_every_request_runs_exactly_once_within_the_batch_limit(
    config: BatchPolicyConfig, workers: int, arrivals: list[tuple[float, int]]
) -> None:
    arrivals = [(gap, min(rows, config.max_batch_size)) for gap, rows in arrivals]
    outcome = simulate(config, workers, arrivals)
    dispatched = [key for batch in outcome.batches for key in batch]
    assert sorted(dispatched) == list(range(len(arrivals)))  # none lost, none duplicated
    for batch in outcome.batches:
        assert sum(arrivals[k][1] for k in batch) <= config.max_batch_size
        assert batch == sorted(batch)  # FIFO within and across batches
    assert dispatched == sorted(dispatched)
    # Work-conserving: a worker is never left idle while requests wait.
    assert outcome.idle_with_eligible_work == []


@settings(max_examples=300, deadline=None)
@given(
    config=configs,
    workers=st.integers(1, 3),
    arrivals=st.lists(
        st.tuples(st.floats(BATCH_TIME_S, 0.05), st.integers(1, 4)), min_size=1, max_size=40
    ),
)
def test_no_request_waits_longer_than_the_delay_plus_one_batch_time(
    config: BatchPolicyConfig, workers: int, arrivals: list[tuple[float, int]]
) -> None:
    """Under load the model keeps up with (arrivals no faster than one batch time apart),
    each request waits at most max_queue_delay plus one batch time."""
    arrivals = [(gap, min(rows, config.max_batch_size)) for gap, rows in arrivals]
    outcome = simulate(config, workers, arrivals)
    bound = config.max_queue_delay_s + BATCH_TIME_S + 1e-9
    assert max(outcome.waited_s.values()) <= bound


def test_lone_request_goes_at_once_when_work_conserving() -> None:
    policy: BatchPolicy[str] = BatchPolicy(
        BatchPolicyConfig(max_batch_size=8, max_queue_delay_s=1.0)
    )
    policy.add("a", 1, now_s=0.0)
    assert policy.next_batch(0.0, idle_workers=1) == ["a"]


def test_classic_mode_waits_for_the_delay_or_a_preferred_size() -> None:
    policy: BatchPolicy[str] = BatchPolicy(
        BatchPolicyConfig(
            max_batch_size=8,
            preferred_batch_sizes=(4,),
            max_queue_delay_s=0.1,
            work_conserving=False,
        )
    )
    policy.add("a", 1, now_s=0.0)
    assert policy.next_batch(0.05, idle_workers=1) is None
    assert policy.wake_at_s() == pytest.approx(0.1)
    policy.add("b", 3, now_s=0.06)
    assert policy.next_batch(0.06, idle_workers=1) == ["a", "b"]  # preferred size 4 reached
    policy.add("c", 1, now_s=0.2)
    assert policy.next_batch(0.25, idle_workers=1) is None
    assert policy.next_batch(0.31, idle_workers=1) == ["c"]  # delay expired


def test_no_batch_while_every_worker_is_busy_and_cancel_frees_rows() -> None:
    policy: BatchPolicy[str] = BatchPolicy(BatchPolicyConfig(max_batch_size=4))
    policy.add("a", 2, now_s=0.0)
    policy.add("b", 2, now_s=0.0)
    assert policy.next_batch(0.0, idle_workers=0) is None
    assert policy.remove("a") is True
    assert policy.remove("a") is False
    assert policy.queued_rows == 2
    assert policy.next_batch(0.0, idle_workers=1) == ["b"]
    assert len(policy) == 0


def test_disabled_batching_runs_one_request_per_call() -> None:
    policy: BatchPolicy[int] = BatchPolicy(BatchPolicyConfig(max_batch_size=8, enabled=False))
    for key in range(3):
        policy.add(key, 1, now_s=0.0)
    assert policy.next_batch(0.0, idle_workers=3) == [0]


def test_only_a_batch_that_cannot_grow_is_handed_out_for_staging() -> None:
    policy: BatchPolicy[str] = BatchPolicy(BatchPolicyConfig(max_batch_size=4))
    policy.add("a", 1, now_s=0.0)
    policy.add("b", 2, now_s=0.0)
    assert policy.next_full_batch() is None  # 3 rows, room for one more
    policy.add("c", 2, now_s=0.0)
    assert policy.next_full_batch() == ["a", "b"]  # "c" does not fit: a, b cannot grow
    assert policy.next_full_batch() is None
    policy.add("d", 2, now_s=0.0)
    assert policy.next_full_batch() == ["c", "d"]  # exactly the limit
    assert len(policy) == 0
    assert policy.queued_rows == 0
    assert policy.next_full_batch() is None


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.integers(1, 5), max_size=30), limit=st.integers(1, 8))
def test_full_batches_are_fifo_prefixes_within_the_limit(rows: list[int], limit: int) -> None:
    policy: BatchPolicy[int] = BatchPolicy(BatchPolicyConfig(max_batch_size=limit))
    for key, n in enumerate(rows):
        policy.add(key, n, now_s=0.0)
    taken: list[int] = []
    while (keys := policy.next_full_batch()) is not None:
        size = sum(rows[k] for k in keys)
        following = len(taken) + len(keys)
        assert size <= limit or len(keys) == 1  # an oversized request runs alone
        # full: at the limit, or the next request in line does not fit
        assert size >= limit or (following < len(rows) and size + rows[following] > limit)
        taken += keys
    assert taken == list(range(len(taken)))  # FIFO, nothing skipped or repeated
    assert len(policy) == len(rows) - len(taken)
