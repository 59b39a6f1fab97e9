"""The continuous-batching scheduler on synthetic inputs: no model, no clock, no threads.

A random workload (arrivals, aborts before and during steps, EOS at random) is driven
through schedule → update while a shadow model checks the invariants of every step; then
the queue is drained to prove liveness.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import podserve.scheduling as scheduling
from podserve.core.errors import InvalidInput
from podserve.scheduling import (
    FinishedRequest,
    RequestStatus,
    Scheduler,
    SchedulerConfig,
    SchedulerOutput,
    SequenceOutput,
    SequenceRequest,
    StepResult,
)

FINISHED = {
    RequestStatus.FINISHED_STOPPED,
    RequestStatus.FINISHED_LENGTH,
    RequestStatus.FINISHED_ABORTED,
}


def _result(out: SchedulerOutput, stop: frozenset[str] = frozenset()) -> StepResult:
    return StepResult(
        tuple(
            SequenceOutput(c.request_id, int(c.samples), c.samples and c.request_id in stop)
            for c in out.chunks
        )
    )


@st.composite
def configs(draw: st.DrawFn) -> SchedulerConfig:
    max_num_seqs = draw(st.integers(1, 6))
    return SchedulerConfig(
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=draw(st.integers(max_num_seqs, 48)),
        kv_cache_tokens=draw(st.integers(8, 96)),
        prefill_chunk_tokens=draw(st.integers(1, 32)),
    )


class _Harness:
    """Drives a scheduler and keeps an independent account of what it must hold."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.sched = Scheduler(config)
        self.requests: dict[str, SequenceRequest] = {}
        self.kv: dict[str, int] = {}  # request -> KV it holds, per the schedules seen
        self.finished: dict[str, RequestStatus] = {}
        self.aborted: set[str] = set()
        self.stopped: set[str] = set()
        self.next_id = 0

    def add(self, prompt_tokens: int, max_new_tokens: int) -> None:
        request_id = f"r{self.next_id}"
        self.next_id += 1
        request = SequenceRequest(request_id, prompt_tokens, max_new_tokens)
        if prompt_tokens + max_new_tokens > self.config.kv_cache_tokens:
            with pytest.raises(InvalidInput, match="exceeds the KV cache"):
                self.sched.add(request)
            return
        self.sched.add(request)
        self.requests[request_id] = request
        self.kv[request_id] = 0

    def abort(self, index: int) -> None:
        live = sorted(r for r in self.requests if r not in self.finished)
        if not live:
            assert self.sched.abort("nope") is None
            return
        request_id = live[index % len(live)]
        before = self.sched.kv_used_tokens
        done = self.sched.abort(request_id)
        assert done == FinishedRequest(
            request_id, RequestStatus.FINISHED_ABORTED, self.requests[request_id].generated_tokens
        )
        # Cancellation frees the request's KV at once.
        assert self.sched.kv_used_tokens == before - self.kv.pop(request_id)
        self.record(done)
        self.aborted.add(request_id)
        assert self.sched.abort(request_id) is None

    def record(self, done: FinishedRequest) -> None:
        assert done.request_id not in self.finished, "a request finished twice"
        self.finished[done.request_id] = done.status
        self.kv.pop(done.request_id, None)

    def schedule(self) -> SchedulerOutput:
        cfg = self.config
        before = {
            r.request_id: (r.status, r.computed_tokens, r.pending_tokens)
            for r in self.requests.values()
            if r.request_id not in self.finished
        }
        waiting = [
            r
            for r in self.requests.values()
            if before.get(r.request_id, (None,))[0]
            in (RequestStatus.WAITING, RequestStatus.PREEMPTED)
        ]
        out = self.sched.schedule()
        ids = [c.request_id for c in out.chunks]
        assert len(ids) == len(set(ids)), "a request scheduled twice in a step"
        assert out.num_tokens <= cfg.max_num_batched_tokens
        assert len(out.chunks) <= cfg.max_num_seqs
        assert self.sched.num_running <= cfg.max_num_seqs
        for request_id in out.preempted:
            self.kv[request_id] = 0
            assert self.requests[request_id].status is RequestStatus.PREEMPTED
        for chunk in out.chunks:
            request = self.requests[chunk.request_id]
            assert request.status is RequestStatus.RUNNING
            assert chunk.num_tokens >= 1
            assert chunk.start == self.kv[chunk.request_id]
            self.kv[chunk.request_id] += chunk.num_tokens
            assert chunk.samples == (request.computed_tokens == request.total_tokens)
            if chunk.num_tokens > 1:
                assert chunk.num_tokens <= cfg.prefill_chunk_tokens
        # The KV budget is never exceeded, and matches the shadow account.
        assert self.sched.kv_used_tokens == sum(self.kv.values()) <= cfg.kv_cache_tokens
        assert self.sched.kv_usage_ratio <= 1.0
        # No starvation: a request that was decoding and is still running decodes now.
        for request_id, (status, _, pending) in before.items():
            request = self.requests[request_id]
            was_decoding = status is RequestStatus.RUNNING and pending == 1
            if was_decoding and request.status is RequestStatus.RUNNING:
                assert request_id in ids
        # FCFS: fresh requests are admitted in arrival order and never ahead of a preempted one.
        admitted = [r for r in waiting if r.status is RequestStatus.RUNNING]
        still = [r for r in waiting if r.status is not RequestStatus.RUNNING]
        for request in admitted:
            if before[request.request_id][0] is RequestStatus.WAITING:
                for other in still:
                    assert other.status is not RequestStatus.PREEMPTED or (
                        other.request_id in out.preempted
                    )
                    if before[other.request_id][0] is RequestStatus.WAITING:
                        assert other.arrival > request.arrival
        # Work is never withheld: something runs whenever something is unfinished.
        assert out.chunks or not self.sched.has_unfinished
        return out

    def update(self, out: SchedulerOutput, stop: frozenset[str], early: bool = False) -> None:
        """Apply the step. `early`: as the engine does, first end each request whose
        token of this step ends it (`finish_in_step`), then update with the others."""
        result = _result(out, stop)
        if early:
            rest = []
            for output in result.outputs:
                request_id = output.request_id
                live = self.sched.get(request_id) is not None
                ends = output.stopped or self.sched.samples_last_token(request_id)
                if not (live and output.num_new_tokens and ends):
                    rest.append(output)
                    continue
                before = self.sched.kv_used_tokens
                done = self.sched.finish_in_step(request_id, stopped=output.stopped)
                assert self.sched.kv_used_tokens == before - self.kv[request_id]
                self._finished_by_step(done, stop)
            result = StepResult(tuple(rest))
        for done in self.sched.update(result):
            self._finished_by_step(done, stop)
        for request in self.requests.values():
            assert request.generated_tokens <= request.max_new_tokens

    def _finished_by_step(self, done: FinishedRequest, stop: frozenset[str]) -> None:
        request = self.requests[done.request_id]
        assert done.status is request.status
        if done.status is RequestStatus.FINISHED_STOPPED:
            self.stopped.add(done.request_id)
            assert done.request_id in stop
        else:
            assert done.status is RequestStatus.FINISHED_LENGTH
            assert request.generated_tokens == request.max_new_tokens
        self.record(done)


@settings(max_examples=150, deadline=None)
@given(config=configs(), data=st.data())
def test_random_workload_keeps_every_invariant(
    config: SchedulerConfig, data: st.DataObject
) -> None:
    h = _Harness(config)
    for _ in range(data.draw(st.integers(1, 40), label="steps")):
        for _ in range(data.draw(st.integers(0, 3), label="arrivals")):
            h.add(data.draw(st.integers(1, 60)), data.draw(st.integers(1, 30)))
        if data.draw(st.booleans(), label="abort before"):
            h.abort(data.draw(st.integers(0, 100)))
        out = h.schedule()
        if data.draw(st.integers(0, 4), label="abort in flight") == 0:
            h.abort(data.draw(st.integers(0, 100)))
        ids = sorted(c.request_id for c in out.chunks)
        stop = (
            frozenset(data.draw(st.lists(st.sampled_from(ids), max_size=2))) if ids else frozenset()
        )
        h.update(out, stop, early=data.draw(st.booleans(), label="finish in step"))
    # Drain with no more arrivals: everything finishes, in bounded steps (no livelock).
    # The oldest running request is never the victim, so each finishes within
    # prompt + 2 * max_new_tokens steps of becoming the oldest.
    limit = sum(r.prompt_tokens + 2 * r.max_new_tokens + 1 for r in h.requests.values())
    steps = 0
    while h.sched.has_unfinished:
        steps += 1
        assert steps <= limit, "the scheduler stopped making progress"
        h.update(h.schedule(), frozenset(), early=steps % 2 == 0)
    # No request lost or duplicated, and each ended the way it should.
    assert set(h.finished) == set(h.requests)
    assert h.sched.kv_used_tokens == 0
    assert h.sched.num_waiting == 0
    assert h.sched.num_running == 0
    for request_id, status in h.finished.items():
        assert (status is RequestStatus.FINISHED_ABORTED) == (request_id in h.aborted)
        assert (status is RequestStatus.FINISHED_STOPPED) == (request_id in h.stopped)
        assert status in FINISHED
        assert h.requests[request_id].status is status


def _run(
    sched: Scheduler, stop: frozenset[str] = frozenset()
) -> tuple[SchedulerOutput, tuple[FinishedRequest, ...]]:
    out = sched.schedule()
    return out, sched.update(_result(out, stop))


def _chunks(out: SchedulerOutput) -> list[tuple[str, int, int, bool]]:
    return [(c.request_id, c.start, c.num_tokens, c.samples) for c in out.chunks]


def test_decodes_go_first_and_a_long_prompt_is_chunked_around_them() -> None:
    sched = Scheduler(
        SchedulerConfig(
            max_num_seqs=4, max_num_batched_tokens=8, kv_cache_tokens=200, prefill_chunk_tokens=8
        )
    )
    sched.add(SequenceRequest("a", prompt_tokens=3, max_new_tokens=10))
    out, _ = _run(sched)
    assert _chunks(out) == [("a", 0, 3, True)]
    sched.add(SequenceRequest("long", prompt_tokens=20, max_new_tokens=5))
    out, _ = _run(sched)
    assert _chunks(out) == [("a", 3, 1, True), ("long", 0, 7, False)]
    out, _ = _run(sched)
    assert _chunks(out) == [("a", 4, 1, True), ("long", 7, 7, False)]
    out, _ = _run(sched)
    assert _chunks(out) == [("a", 5, 1, True), ("long", 14, 6, True)]
    out, _ = _run(sched)
    assert _chunks(out) == [("a", 6, 1, True), ("long", 20, 1, True)]


def test_finish_reasons_and_kv_release() -> None:
    sched = Scheduler(
        SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=16, kv_cache_tokens=64)
    )
    sched.add(SequenceRequest("eos", prompt_tokens=4, max_new_tokens=10))
    sched.add(SequenceRequest("len", prompt_tokens=4, max_new_tokens=2))
    _run(sched)
    assert sched.kv_used_tokens == 8
    _out, done = _run(sched, stop=frozenset({"eos"}))
    assert done == (
        FinishedRequest("eos", RequestStatus.FINISHED_STOPPED, 2),
        FinishedRequest("len", RequestStatus.FINISHED_LENGTH, 2),
    )
    assert sched.kv_used_tokens == 0
    assert not sched.has_unfinished
    assert sched.get("eos") is None


def test_samples_last_token_predicts_the_length_finish_of_update() -> None:
    sched = Scheduler(
        SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=16, kv_cache_tokens=64)
    )
    sched.add(SequenceRequest("two", prompt_tokens=4, max_new_tokens=2))
    predictions = []
    finished: tuple[FinishedRequest, ...] = ()
    while not finished:
        out = sched.schedule()
        predictions.append(sched.samples_last_token("two"))
        finished = sched.update(
            StepResult(tuple(SequenceOutput(c.request_id, 1, False) for c in out.chunks))
        )
    assert predictions == [False, True]  # the first token does not end it, the second does
    assert sched.samples_last_token("two")  # gone


def test_finish_in_step_ends_a_request_before_the_update_and_frees_its_kv() -> None:
    sched = Scheduler(
        SchedulerConfig(max_num_seqs=3, max_num_batched_tokens=16, kv_cache_tokens=64)
    )
    sched.add(SequenceRequest("one", prompt_tokens=4, max_new_tokens=1))  # first = last
    sched.add(SequenceRequest("eos", prompt_tokens=3, max_new_tokens=8))
    sched.add(SequenceRequest("more", prompt_tokens=2, max_new_tokens=8))
    sched.schedule()
    assert sched.kv_used_tokens == 9
    with pytest.raises(ValueError, match="does not end it"):
        sched.finish_in_step("more", stopped=False)
    done = sched.finish_in_step("one", stopped=False)
    assert done == FinishedRequest("one", RequestStatus.FINISHED_LENGTH, 1)
    assert sched.finish_in_step("eos", stopped=True) == FinishedRequest(
        "eos", RequestStatus.FINISHED_STOPPED, 1
    )
    assert sched.kv_used_tokens == 2  # only "more" still holds KV
    assert sched.get("one") is None
    assert sched.num_running == 1
    with pytest.raises(ValueError, match="not in the step in flight"):
        sched.finish_in_step("one", stopped=False)  # a second time
    # the update carries only the request that goes on; the ended ones are not expected
    assert sched.update(StepResult((SequenceOutput("more"),))) == ()
    out = sched.schedule()
    assert [(c.request_id, c.num_tokens) for c in out.chunks] == [("more", 1)]
    with pytest.raises(ValueError, match="not in the step in flight"):
        sched.finish_in_step("gone", stopped=True)


def test_finish_in_step_refuses_a_partial_prefill() -> None:
    sched = Scheduler(
        SchedulerConfig(
            max_num_seqs=1, max_num_batched_tokens=4, kv_cache_tokens=64, prefill_chunk_tokens=4
        )
    )
    sched.add(SequenceRequest("long", prompt_tokens=10, max_new_tokens=1))
    sched.schedule()  # the first 4 of 10 prompt tokens: nothing sampled
    with pytest.raises(ValueError, match="samples no token"):
        sched.finish_in_step("long", stopped=True)


def test_kv_pressure_preempts_the_newest_and_recompute_keeps_generated_tokens() -> None:
    sched = Scheduler(
        SchedulerConfig(
            max_num_seqs=2, max_num_batched_tokens=16, kv_cache_tokens=12, prefill_chunk_tokens=16
        )
    )
    old = SequenceRequest("old", prompt_tokens=4, max_new_tokens=8)
    new = SequenceRequest("new", prompt_tokens=4, max_new_tokens=8)
    sched.add(old)
    sched.add(new)
    _run(sched)  # both prefilled: 8 of 12 KV tokens, one token generated each
    _run(sched)
    _run(sched)
    assert sched.kv_usage_ratio == 1.0
    assert new.generated_tokens == 3
    out = sched.schedule()
    assert out.preempted == ("new",)
    assert _chunks(out) == [("old", 6, 1, True)]
    assert new.status is RequestStatus.PREEMPTED
    assert new.computed_tokens == 0
    assert new.generated_tokens == 3
    assert sched.num_preemptions == 1
    assert sched.num_waiting == 1
    assert sched.num_running == 1
    sched.update(_result(out))
    while old.status is RequestStatus.RUNNING:
        _run(sched)
    out = sched.schedule()  # "new" re-prefills prompt + generated, then samples its 4th
    assert _chunks(out) == [("new", 0, 7, True)]


def test_preempted_requests_go_before_new_arrivals() -> None:
    sched = Scheduler(
        SchedulerConfig(
            max_num_seqs=3, max_num_batched_tokens=16, kv_cache_tokens=10, prefill_chunk_tokens=16
        )
    )
    sched.add(SequenceRequest("a", 4, 6))
    sched.add(SequenceRequest("b", 4, 6))
    _run(sched)
    _run(sched)
    out, _ = _run(sched)
    assert out.preempted == ("b",)
    sched.add(SequenceRequest("c", 1, 1))
    while sched.get("a") is not None:
        out, _ = _run(sched)
        assert "c" not in [c.request_id for c in out.chunks]
    out = sched.schedule()
    assert next(c.request_id for c in out.chunks) == "b"


def test_add_rejects_what_can_never_fit_and_bad_input() -> None:
    sched = Scheduler(
        SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=8, kv_cache_tokens=100)
    )
    with pytest.raises(InvalidInput, match=r"= 101 tokens exceeds the KV cache of 100 tokens"):
        sched.add(SequenceRequest("big", prompt_tokens=90, max_new_tokens=11))
    with pytest.raises(InvalidInput, match="at least one token"):
        sched.add(SequenceRequest("empty", prompt_tokens=0, max_new_tokens=1))
    with pytest.raises(InvalidInput, match="max_new_tokens must be >= 1"):
        sched.add(SequenceRequest("none", prompt_tokens=1, max_new_tokens=0))
    sched.add(SequenceRequest("ok", prompt_tokens=90, max_new_tokens=10))
    with pytest.raises(ValueError, match="already scheduled"):
        sched.add(SequenceRequest("ok", prompt_tokens=1, max_new_tokens=1))
    assert sched.num_waiting == 1


def test_abort_during_a_step_drops_its_output() -> None:
    sched = Scheduler(SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=8, kv_cache_tokens=64))
    sched.add(SequenceRequest("x", 3, 5))
    out = sched.schedule()
    assert sched.kv_used_tokens == 3
    done = sched.abort("x")
    assert done is not None
    assert done.status is RequestStatus.FINISHED_ABORTED
    assert sched.kv_used_tokens == 0
    assert sched.update(_result(out)) == ()
    assert sched.schedule().is_empty


def test_step_protocol_misuse_is_an_error() -> None:
    sched = Scheduler(SchedulerConfig(max_num_seqs=1, max_num_batched_tokens=4, kv_cache_tokens=64))
    with pytest.raises(RuntimeError, match="without a scheduled step"):
        sched.update(StepResult(()))
    sched.add(SequenceRequest("x", 8, 2))
    sched.schedule()
    with pytest.raises(RuntimeError, match="before update"):
        sched.schedule()
    with pytest.raises(ValueError, match="exactly one token"):
        sched.update(StepResult((SequenceOutput("x", 1),)))
    sched.update(StepResult(()))  # a malformed result left the step pending
    out = sched.schedule()
    assert _chunks(out) == [("x", 4, 4, True)]
    with pytest.raises(ValueError, match="was sampled but has no output"):
        sched.update(StepResult(()))
    with pytest.raises(ValueError, match="was not scheduled"):
        sched.update(StepResult((SequenceOutput("x"), SequenceOutput("y", 0))))
    assert sched.update(StepResult((SequenceOutput("x"),))) == ()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_num_seqs": 0}, "max_num_seqs must be >= 1"),
        ({"kv_cache_tokens": 0}, "kv_cache_tokens must be >= 1"),
        ({"prefill_chunk_tokens": 0}, "prefill_chunk_tokens must be >= 1"),
        ({"max_num_seqs": 8, "max_num_batched_tokens": 4}, "every running request can decode"),
        ({"policy": "lifo"}, "unknown scheduling policy"),
    ],
)
def test_config_validation(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        SchedulerConfig(**kwargs)


def test_status_order_and_public_surface() -> None:
    assert sorted(RequestStatus) == list(RequestStatus)
    assert [s for s in RequestStatus if s.is_finished] == sorted(FINISHED)
    assert scheduling.__all__ == sorted(scheduling.__all__)
    assert set(scheduling.__all__) == {n for n in dir(scheduling) if n[0].isupper()}
