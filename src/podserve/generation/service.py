"""A served generative model: the engine plus admission, token metrics and the state the
lifecycle and the repository read (in flight, queue pressure, wedged step thread).

Admission for generation (DESIGN.md §3): prompt + max_tokens over the context and
max_tokens over the configured cap are 400s (the request can never run); a full waiting
queue, or too many prompt tokens already waiting, is a 503 with Retry-After (it may run
later, elsewhere). Nothing queues without bound.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

from podserve.config.model_config import ModelConfig
from podserve.core.clock import Clock
from podserve.core.errors import InvalidInput, Unavailable
from podserve.core.tensors import TensorSpec
from podserve.generation.engine import GenerationEngine
from podserve.generation.executor import ModelExecutor
from podserve.generation.sampling import SamplingParams
from podserve.generation.stream import TokenEvent
from podserve.obs.metrics import GenerationMetrics


@dataclass(frozen=True, slots=True)
class GenerativeLimits:
    max_queue: int
    max_tokens_cap: int
    max_queued_prompt_tokens: int
    max_batch_time_s: float
    max_num_seqs: int


class GenerativeWorker:
    """What the repository keeps for a loaded generative model."""

    def __init__(
        self,
        *,
        config: ModelConfig,
        executor: ModelExecutor,
        engine: GenerationEngine,
        limits: GenerativeLimits,
        metrics: GenerationMetrics,
        clock: Clock,
    ) -> None:
        self.name = config.name
        self.version = config.version
        self.executor = executor
        self.engine = engine
        self.limits = limits
        self._metrics = metrics
        self._clock = clock
        self._inflight = 0
        self._queued_prompt_tokens = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._next_id = 0
        self._last_event_s = clock.now_s()
        self.last_device_error: str | None = None
        # Generative models take text, not tensors: no OIP tensor metadata.
        self.model_inputs: tuple[TensorSpec, ...] = ()
        self.model_outputs: tuple[TensorSpec, ...] = ()

    # --- state read by the lifecycle and the repository ----------------------------------
    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def queue_depth(self) -> int:
        return self.engine.stats().num_waiting

    @property
    def saturated(self) -> bool:
        return self.queue_depth >= self.limits.max_queue

    def longest_busy_s(self) -> float:
        """The watchdog's heartbeat: with requests in flight, the time since the step
        thread last produced an event for any of them (a wedged step produces none)."""
        if self._inflight == 0:
            return 0.0
        return self._clock.now_s() - self._last_event_s

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        self.engine.stop()

    def refresh_gauges(self) -> None:
        stats = self.engine.stats()
        self._metrics.set_engine_state(
            running=stats.num_running,
            waiting=stats.num_waiting,
            kv_usage=stats.kv_usage_ratio,
            preemptions=stats.num_preemptions,
        )

    # --- the request path --------------------------------------------------------------
    def check(self, prompt_ids: list[int], params: SamplingParams, copies: int = 1) -> None:
        """Refuse early and clearly, before anything is queued. `copies`: the request's
        `n` sequences, admitted all together or not at all."""
        if params.max_tokens > self.limits.max_tokens_cap:
            raise InvalidInput(
                f"max_tokens={params.max_tokens} exceeds this model's limit of "
                f"{self.limits.max_tokens_cap}"
            )
        context = self.executor.max_context
        if len(prompt_ids) + params.max_tokens > context:
            raise InvalidInput(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) = "
                f"{len(prompt_ids) + params.max_tokens} tokens exceeds the model's context of "
                f"{context} tokens"
            )
        stats = self.engine.stats()
        if stats.num_waiting + copies > self.limits.max_queue:
            raise Unavailable(
                f"model {self.name!r} has {stats.num_waiting} requests waiting (limit "
                f"{self.limits.max_queue}); retry later or on another replica",
                reason="queue_full",
                retry_after_s=self._retry_after_s(stats.num_waiting),
            )
        queued = self._queued_prompt_tokens + copies * len(prompt_ids)
        if queued > self.limits.max_queued_prompt_tokens:
            raise Unavailable(
                f"model {self.name!r} has {self._queued_prompt_tokens} prompt tokens waiting "
                f"(limit {self.limits.max_queued_prompt_tokens}); retry later",
                reason="queued_tokens",
                retry_after_s=self._retry_after_s(stats.num_waiting),
            )

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        on_first_token: Callable[[], None] | None = None,
    ) -> AsyncGenerator[TokenEvent, None]:
        """Token events of one request. Cancelling the consumer aborts the request, which
        frees its sequence slot and KV cache within one engine step."""
        self.check(prompt_ids, params)
        request_id = f"{self.name}-{self._next_id}"
        self._next_id += 1
        started = self._clock.now_s()
        stream = self.engine.submit(request_id, prompt_ids, params)
        if self._inflight == 0:
            self._last_event_s = started
        self._inflight += 1
        self._idle.clear()
        self._queued_prompt_tokens += len(prompt_ids)
        waiting = True
        first_s: float | None = None
        last_s = started
        generated = 0
        finished = False
        try:
            async for event in stream:
                now = self._last_event_s = self._clock.now_s()
                if event.queued_s is not None:
                    self._metrics.queue_time.observe(event.queued_s)
                if event.token_id is not None:
                    generated += 1
                    if first_s is None:
                        first_s = now
                        self._metrics.ttft.observe(now - started)
                        if waiting:
                            self._queued_prompt_tokens -= len(prompt_ids)
                            waiting = False
                    else:
                        self._metrics.inter_token.observe(now - last_s)
                    last_s = now
                if event.finish_reason is not None:
                    finished = True
                    if event.finish_reason == "error":
                        self.last_device_error = "the generation step failed"
                yield event
        finally:
            if not finished:
                self.engine.abort(request_id)
            if waiting:
                self._queued_prompt_tokens -= len(prompt_ids)
            end = self._clock.now_s()
            self._metrics.e2e.observe(end - started)
            self._metrics.prompt_tokens.inc(len(prompt_ids))
            self._metrics.generation_tokens.inc(generated)
            if first_s is not None and generated > 1:
                self._metrics.tpot.observe((end - first_s) / (generated - 1))
            self._inflight -= 1
            if self._inflight == 0:
                self._idle.set()

    def _retry_after_s(self, waiting: int) -> float:
        # A rough drain estimate: the waiting requests share the running slots.
        return float(max(1, min(60, math.ceil(waiting / max(1, self.limits.max_num_seqs)))))
