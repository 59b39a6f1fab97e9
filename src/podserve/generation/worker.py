"""The in-house engine behind the `EngineClient` seam: admission, the engine's streams,
and the token metrics. (The `Worker` state the lifecycle and the repository read is
`generation/served.py`'s, the same for every engine.)

Admission (DESIGN.md §3) is `admit`, one synchronous step: prompt + max_tokens over the
context, max_tokens over the configured cap, or a prompt the KV budget can never hold are
400s (the request can never run); a full waiting queue, or too many prompt tokens already
waiting, is a 503 with Retry-After (it may run later, elsewhere). Every sequence of the
request is submitted to the engine before `admit` returns, or none is. Nothing queues
without bound, and nothing is refused after the response has started.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from podserve.admission import DrainRateEstimator
from podserve.config.model_config import ModelConfig
from podserve.core.clock import Clock
from podserve.core.errors import InvalidInput, Unavailable
from podserve.generation.client import TokenStream
from podserve.generation.engine import EngineStats, GenerationEngine
from podserve.generation.executor import ModelExecutor
from podserve.generation.sampling import SamplingParams
from podserve.generation.stream import RequestStream, TokenEvent
from podserve.obs.metrics import GenerationMetrics


@dataclass(frozen=True, slots=True)
class GenerativeLimits:
    max_queue: int
    max_tokens_cap: int
    max_queued_prompt_tokens: int
    max_batch_time_s: float
    max_num_seqs: int


class GenerativeWorker:
    """The in-house engine's `generation.client.EngineClient` (`generation/inhouse.py`
    registers it; `generation.served.EngineWorker` serves it as an `engine.Worker`)."""

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
        self._next_id = 0
        self._last_event_s = clock.now_s()
        self._drain_rate = DrainRateEstimator(clock)
        self.last_device_error: str | None = None

    @property
    def inflight(self) -> int:
        """Sequences admitted and not yet closed."""
        return self._inflight

    def close(self) -> None:
        self.engine.stop()

    # --- EngineClient ---------------------------------------------------------------------
    @property
    def max_context(self) -> int:
        return self.executor.max_context

    def encode_prompt(self, text: str) -> list[int]:
        return self.executor.encode_prompt(text)

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        return self.executor.encode_chat(messages)

    def token_text(self, token_id: int) -> str:
        return self.executor.token_text(token_id)

    def stats(self) -> EngineStats:
        return self.engine.stats()

    def check(self, prompt_ids: Sequence[int], params: SamplingParams, copies: int = 1) -> None:
        """Refuse early and clearly, before anything is queued. `copies`: the request's
        `n` sequences, admitted all together or not at all."""
        vocab = self.executor.vocab_size
        outside = [token for token, _ in params.logit_bias if token >= vocab]
        if outside:
            raise InvalidInput(
                f"logit_bias names token id {outside[0]}, outside the model's vocabulary "
                f"of {vocab} tokens"
            )
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
                retry_after_s=self._drain_rate.retry_after_s(stats.num_waiting),
            )
        queued = self._queued_prompt_tokens + copies * len(prompt_ids)
        if queued > self.limits.max_queued_prompt_tokens:
            raise Unavailable(
                f"model {self.name!r} has {self._queued_prompt_tokens} prompt tokens waiting "
                f"(limit {self.limits.max_queued_prompt_tokens}); retry later",
                reason="queued_tokens",
                retry_after_s=self._drain_rate.retry_after_s(stats.num_waiting),
            )

    def admit(
        self, prompt_ids: Sequence[int], sequences: Sequence[SamplingParams]
    ) -> list[TokenStream]:
        if not sequences:
            raise InvalidInput("a generation request needs at least one sequence")
        prompt = list(prompt_ids)
        # a request that named no max_tokens: lowered to the cap and what the context leaves
        context, cap = self.executor.max_context, self.limits.max_tokens_cap
        sequences = [params.fitted(len(prompt), context, cap) for params in sequences]
        # the sequences share the prompt and max_tokens: one check for all
        self.check(prompt, sequences[0], copies=len(sequences))
        submitted: list[_Sequence] = []
        try:
            for params in sequences:
                request_id = f"{self.name}-{self._next_id}"
                self._next_id += 1
                # the engine's own refusals (the KV budget) raise here, before any byte
                stream = self.engine.submit(request_id, prompt, params)
                submitted.append(_Sequence(self, request_id, stream, len(prompt)))
        except BaseException:
            for sequence in submitted:
                sequence.close()
            raise
        return list(submitted)

    # --- accounting, called by the sequences ----------------------------------------------
    def _started(self, prompt_tokens: int) -> None:
        if self._inflight == 0:
            self._last_event_s = self._clock.now_s()
        self._inflight += 1
        self._queued_prompt_tokens += prompt_tokens

    def _first_token(self, prompt_tokens: int) -> None:
        self._queued_prompt_tokens -= prompt_tokens

    def _event(self) -> float:
        now = self._last_event_s = self._clock.now_s()
        return now

    def _ended(self) -> None:
        self._drain_rate.record_completions(1)
        self._inflight -= 1


class _Sequence:
    """One admitted sequence: the engine's stream plus its metrics, settled once."""

    def __init__(
        self, worker: GenerativeWorker, request_id: str, stream: RequestStream, prompt: int
    ) -> None:
        self._worker = worker
        self._request_id = request_id
        self._events = stream.__aiter__()
        self._prompt = prompt
        self._metrics = worker._metrics
        self._started_s = worker._clock.now_s()
        self._first_s: float | None = None
        self._last_s = self._started_s
        self._generated = 0
        self._waiting = True
        self._finished = False
        self._closed = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        worker._started(prompt)

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._closed:
            raise StopAsyncIteration
        try:
            event = await self._events.__anext__()
        except BaseException:  # the end, or the consumer cancelled: settle now
            self.close()
            raise
        now = self._worker._event()
        metrics = self._metrics
        if event.queued_s is not None:
            metrics.queue_time.observe(event.queued_s)
        if event.token_id is not None:
            self._generated += 1
            if self._first_s is None:
                self._first_s = now
                metrics.ttft.observe(now - self._started_s)
                if self._waiting:
                    self._worker._first_token(self._prompt)
                    self._waiting = False
            else:
                metrics.inter_token.observe(now - self._last_s)
            self._last_s = now
        if event.finish_reason is not None:
            self._finished = True
            if event.finish_reason == "error":
                self._worker.last_device_error = "the generation step failed"
        return event

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        worker = self._worker
        if not self._finished:
            worker.engine.abort(self._request_id)  # frees its slot and KV cache
        if self._waiting:
            worker._first_token(self._prompt)
        end = worker._clock.now_s()
        metrics = self._metrics
        metrics.e2e.observe(end - self._started_s)
        metrics.prompt_tokens.inc(self._prompt)
        metrics.generation_tokens.inc(self._generated)
        if self._first_s is not None and self._generated > 1:
            metrics.tpot.observe((end - self._first_s) / (self._generated - 1))
        worker._ended()

    def __del__(self) -> None:
        # Admitted but never read nor closed (its consumer vanished): free the slot. Not
        # here: a collection can run on any thread, the engine's step thread included
        # while it holds the engine lock; the loop closes it (PEP 442 allows the object
        # to outlive this call).
        if not self._closed and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the process exits
                self._loop.call_soon_threadsafe(self.close)
