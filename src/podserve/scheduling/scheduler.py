"""Iteration-level (continuous-batching) scheduler: a pure state machine, vLLM v1 style.

The engine step is three lines: `out = scheduler.schedule()`, run the model on
`out.chunks`, `scheduler.update(result)`. The scheduler never calls the model; it counts
tokens. Each step:

1. Running requests that decode get one token each, oldest admitted first, so a long
   prompt never stalls a stream (`max_num_batched_tokens >= max_num_seqs` guarantees they
   all fit the step's token budget).
2. Running requests still (re-)prefilling get a chunk of what is left of their sequence,
   at most `prefill_chunk_tokens` and what the step's budget leaves.
3. If nobody was preempted, waiting requests are admitted in queue order (no skipping)
   while `max_num_seqs`, the token budget and the KV cache allow their first chunk.

KV accounting: a request holds KV for the tokens it has computed (see
`SequenceRequest`); a step's tokens are reserved when it is scheduled. When a running
request cannot get the KV it needs, the policy's victim (the newest admitted, for FCFS) is
preempted by recompute: its KV is freed and it goes back to the front of the queue keeping
its generated tokens. The budget is never exceeded. A request that could never fit alone
is rejected by `add`, so the oldest running request can always make progress.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from podserve.core.errors import InvalidInput
from podserve.scheduling.policy import FcfsPolicy, QueuePolicy
from podserve.scheduling.types import (
    FinishedRequest,
    RequestStatus,
    ScheduledChunk,
    SchedulerOutput,
    SequenceRequest,
    StepResult,
)

PolicyName = Literal["fcfs"]
_POLICIES: dict[str, type[FcfsPolicy]] = {"fcfs": FcfsPolicy}


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_num_seqs: int = 16
    max_num_batched_tokens: int = 512  # per step, decodes and prefill chunks together
    kv_cache_tokens: int = 8192  # the whole KV cache, in tokens
    prefill_chunk_tokens: int = 256  # at most this many prompt tokens per request per step
    policy: PolicyName = "fcfs"

    def __post_init__(self) -> None:
        for name in ("max_num_seqs", "max_num_batched_tokens", "kv_cache_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.prefill_chunk_tokens < 1:
            raise ValueError("prefill_chunk_tokens must be >= 1")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise ValueError(
                "max_num_batched_tokens must be >= max_num_seqs, so that every running "
                "request can decode in every step"
            )
        if self.policy not in _POLICIES:
            raise ValueError(f"unknown scheduling policy {self.policy!r}")


@dataclass(slots=True)
class _Plan:
    """The step being built."""

    budget: int
    chunks: dict[str, ScheduledChunk] = field(default_factory=dict)
    preempted: list[str] = field(default_factory=list)


class Scheduler:
    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self._waiting: QueuePolicy = _POLICIES[config.policy]()
        self._running: list[SequenceRequest] = []  # admission order
        self._requests: dict[str, SequenceRequest] = {}
        self._kv_used = 0
        self._next_arrival = 0
        self._num_preemptions = 0
        self._in_flight: dict[str, tuple[ScheduledChunk, SequenceRequest]] | None = None

    # -- observation ---------------------------------------------------------------------

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def num_waiting(self) -> int:
        """Waiting requests, preempted ones included."""
        return len(self._waiting)

    @property
    def kv_used_tokens(self) -> int:
        return self._kv_used

    @property
    def kv_usage_ratio(self) -> float:
        return self._kv_used / self.config.kv_cache_tokens

    @property
    def num_preemptions(self) -> int:
        """Preemptions since start (a counter, like `vllm:num_preemptions`)."""
        return self._num_preemptions

    @property
    def has_unfinished(self) -> bool:
        return bool(self._requests)

    def samples_last_token(self, request_id: str) -> bool:
        """Whether the token sampled for this request in the step in flight reaches its
        `max_new_tokens` (so `update` finishes it); True for a request that is gone."""
        request = self._requests.get(request_id)
        return request is None or request.generated_tokens + 1 >= request.max_new_tokens

    def get(self, request_id: str) -> SequenceRequest | None:
        """A request still in the scheduler (waiting or running); None once finished."""
        return self._requests.get(request_id)

    # -- requests in and out -------------------------------------------------------------

    def add(self, request: SequenceRequest) -> None:
        """Queue a fresh request; it can join from the next `schedule()` on."""
        if request.prompt_tokens < 1:
            raise InvalidInput("the prompt must have at least one token")
        if request.max_new_tokens < 1:
            raise InvalidInput(f"max_new_tokens must be >= 1, got {request.max_new_tokens}")
        need = request.prompt_tokens + request.max_new_tokens
        if need > self.config.kv_cache_tokens:
            raise InvalidInput(
                f"prompt ({request.prompt_tokens} tokens) + max_new_tokens "
                f"({request.max_new_tokens}) = {need} tokens exceeds the KV cache of "
                f"{self.config.kv_cache_tokens} tokens; shorten the prompt or lower max_tokens"
            )
        if request.request_id in self._requests:
            raise ValueError(f"request {request.request_id!r} is already scheduled")
        if request.status is not RequestStatus.WAITING or request.computed_tokens:
            raise ValueError(f"request {request.request_id!r} is not fresh")
        request.arrival = self._next_arrival
        self._next_arrival += 1
        self._requests[request.request_id] = request
        self._waiting.push(request)

    def abort(self, request_id: str) -> FinishedRequest | None:
        """Drop a waiting or running request and free its KV at once; None if unknown."""
        request = self._requests.get(request_id)
        if request is None:
            return None
        if request.status is RequestStatus.RUNNING:
            self._running.remove(request)
        else:
            self._waiting.remove(request_id)
        return self._finish(request, RequestStatus.FINISHED_ABORTED)

    # -- the step ------------------------------------------------------------------------

    def schedule(self) -> SchedulerOutput:
        """Decide the next step. Must be followed by `update` before the next call."""
        if self._in_flight is not None:
            raise RuntimeError("schedule() called again before update() of the previous step")
        plan = _Plan(budget=self.config.max_num_batched_tokens)
        for request in [r for r in self._running if r.pending_tokens == 1]:
            running = request.status is RequestStatus.RUNNING
            if running and plan.budget > 0 and self._make_room(request, 1, plan):
                self._take(request, 1, plan)
        for request in [r for r in self._running if r.pending_tokens > 1]:
            if plan.budget == 0:
                break
            if request.status is not RequestStatus.RUNNING:
                continue
            if self._kv_free == 0 and not self._make_room(request, 1, plan):
                continue
            chunk = min(request.pending_tokens, self.config.prefill_chunk_tokens, plan.budget)
            self._take(request, min(chunk, self._kv_free), plan)
        if not plan.preempted:
            self._admit(plan)
        self._in_flight = {
            chunk.request_id: (chunk, self._requests[chunk.request_id])
            for chunk in plan.chunks.values()
        }
        return SchedulerOutput(chunks=tuple(plan.chunks.values()), preempted=tuple(plan.preempted))

    def update(self, result: StepResult) -> tuple[FinishedRequest, ...]:
        """Apply what the step produced; return the requests that finished (and left)."""
        in_flight = self._in_flight
        if in_flight is None:
            raise RuntimeError("update() called without a scheduled step")
        outputs = {out.request_id: out for out in result.outputs}
        for request_id, out in outputs.items():
            if request_id not in in_flight:
                raise ValueError(f"request {request_id!r} was not scheduled in this step")
            if out.num_new_tokens != int(in_flight[request_id][0].samples):
                raise ValueError(
                    f"request {request_id!r}: a chunk that reaches the end of its sequence "
                    "yields exactly one token, a partial prefill none"
                )
        sampled = [
            request
            for request_id, (chunk, request) in in_flight.items()
            # a partial prefill yields nothing; a request aborted during the step is gone
            if chunk.samples and self._requests.get(request_id) is request
        ]
        for request in sampled:
            if request.request_id not in outputs:
                raise ValueError(f"request {request.request_id!r} was sampled but has no output")
        self._in_flight = None  # a malformed result above leaves the step pending
        finished: list[FinishedRequest] = []
        for request in sampled:
            done = self._count_token(request, stopped=outputs[request.request_id].stopped)
            if done is not None:
                finished.append(done)
        return tuple(finished)

    def finish_in_step(self, request_id: str, *, stopped: bool) -> FinishedRequest:
        """Apply one request's output of the step in flight before `update`, when that
        token ends it (it `stopped`, or `samples_last_token`): the request leaves now,
        freeing its KV, and `update` no longer expects it.

        The engine publishes each forward's tokens as that forward ends; without this a
        request's last token (for a `max_tokens: 1` request, also its first) would wait for
        the step's later forwards, which is the update's only reason to exist for it."""
        in_flight = self._in_flight
        if in_flight is None or request_id not in in_flight:
            raise ValueError(f"request {request_id!r} is not in the step in flight")
        chunk, request = in_flight[request_id]
        if not chunk.samples or self._requests.get(request_id) is not request:
            raise ValueError(f"request {request_id!r} samples no token in this step")
        if not stopped and request.generated_tokens + 1 < request.max_new_tokens:
            raise ValueError(f"request {request_id!r}: this token does not end it")
        del in_flight[request_id]
        done = self._count_token(request, stopped=stopped)
        assert done is not None  # checked above: this token ends it
        return done

    def _count_token(self, request: SequenceRequest, *, stopped: bool) -> FinishedRequest | None:
        """One sampled token for a running request; the request's end if it ends it."""
        request.generated_tokens += 1
        if stopped:
            status = RequestStatus.FINISHED_STOPPED
        elif request.generated_tokens >= request.max_new_tokens:
            status = RequestStatus.FINISHED_LENGTH
        else:
            return None
        self._running.remove(request)
        return self._finish(request, status)

    # -- internals -----------------------------------------------------------------------

    @property
    def _kv_free(self) -> int:
        return self.config.kv_cache_tokens - self._kv_used

    def _take(self, request: SequenceRequest, num_tokens: int, plan: _Plan) -> None:
        start = request.computed_tokens
        samples = start + num_tokens == request.total_tokens
        plan.chunks[request.request_id] = ScheduledChunk(
            request.request_id, start, num_tokens, samples
        )
        plan.budget -= num_tokens
        request.computed_tokens += num_tokens
        self._kv_used += num_tokens

    def _make_room(self, request: SequenceRequest, kv_tokens: int, plan: _Plan) -> bool:
        """Preempt until `kv_tokens` are free; False if `request` itself was preempted."""
        while self._kv_free < kv_tokens:
            victim = self._waiting.victim(self._running)
            self._preempt(victim, plan)
            if victim is request:
                return False
        return True

    def _preempt(self, request: SequenceRequest, plan: _Plan) -> None:
        self._running.remove(request)
        chunk = plan.chunks.pop(request.request_id, None)
        if chunk is not None:
            plan.budget += chunk.num_tokens
        self._kv_used -= request.computed_tokens
        request.computed_tokens = 0
        request.status = RequestStatus.PREEMPTED
        self._waiting.push_preempted(request)
        self._num_preemptions += 1
        plan.preempted.append(request.request_id)

    def _admit(self, plan: _Plan) -> None:
        """Admit in queue order; the first that does not fit stops admission (no skipping)."""
        while plan.budget > 0 and len(self._running) < self.config.max_num_seqs:
            request = self._waiting.peek()
            if request is None:
                return
            chunk = min(request.pending_tokens, self.config.prefill_chunk_tokens, plan.budget)
            if chunk > self._kv_free:
                return
            self._waiting.pop()
            request.status = RequestStatus.RUNNING
            self._running.append(request)
            self._take(request, chunk, plan)

    def _finish(self, request: SequenceRequest, status: RequestStatus) -> FinishedRequest:
        del self._requests[request.request_id]
        self._kv_used -= request.computed_tokens
        request.computed_tokens = 0
        request.status = status
        return FinishedRequest(request.request_id, status, request.generated_tokens)
