"""The generation engine: a Scheduler and a ModelExecutor stepped by ONE background thread.

Model calls stay off the event loop. Each step is schedule → forward → sample → publish
(per forward, prefills first, so a new request's first token leaves before the decodes
run) → update.
`self._lock` guards the scheduler and the per-request state; it is NOT held while the
model runs, so `submit` and `abort` never wait for a forward pass. The executor belongs
to the step thread alone: an abort only records the request, and the thread frees its
slot at the start of the next step.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from podserve.core.errors import InvalidInput, Unavailable
from podserve.generation.detokenizer import IncrementalDetokenizer
from podserve.generation.executor import ModelExecutor
from podserve.generation.penalties import TokenCounts
from podserve.generation.sampling import (
    Sampler,
    SamplingParams,
    sample_rows,
    token_logprobs,
)
from podserve.generation.stream import FinishReason, RequestStream, TokenEvent
from podserve.scheduling import (
    RequestStatus,
    Scheduler,
    SchedulerConfig,
    SequenceOutput,
    SequenceRequest,
    StepResult,
)

if TYPE_CHECKING:
    import torch

_FINISH_REASONS: dict[RequestStatus, FinishReason] = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


@dataclass(frozen=True, slots=True)
class EngineStats:
    num_running: int
    num_waiting: int
    kv_usage_ratio: float
    num_preemptions: int
    prompt_tokens_total: int
    generation_tokens_total: int


@dataclass(slots=True)
class _Live:
    stream: RequestStream
    sampler: Sampler
    detokenizer: IncrementalDetokenizer
    prompt_ids: list[int]
    submitted_s: float = 0.0
    # Seconds between submission and the first step that computed for the request; sent
    # once, on its first token event (the queue-time metric).
    queued_s: float | None = None
    reported_queue: bool = False


class GenerationEngine:
    def __init__(self, executor: ModelExecutor, config: SchedulerConfig) -> None:
        if config.max_num_seqs > executor.max_num_seqs:
            raise ValueError(
                f"max_num_seqs {config.max_num_seqs} exceeds the executor's "
                f"{executor.max_num_seqs} KV slots"
            )
        slot_tokens = executor.max_num_seqs * executor.max_context
        if config.kv_cache_tokens > slot_tokens:
            raise ValueError(
                f"kv_cache_tokens {config.kv_cache_tokens} exceeds the executor's slot cache "
                f"of {slot_tokens} tokens ({executor.max_num_seqs} slots x "
                f"{executor.max_context} context); lower it to at most {slot_tokens}"
            )
        self.executor = executor
        self.scheduler = Scheduler(config)
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._live: dict[str, _Live] = {}
        # generated-token counts of the penalised requests (penalties.py), kept across steps
        self._counts = TokenCounts()
        self._to_add: list[tuple[str, list[int]]] = []  # executor work for the step thread
        self._to_free: list[str] = []
        self._prompt_tokens = 0
        self._generation_tokens = 0
        self._stopping = False
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="podserve-generation", daemon=True)

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        """Abort everything still running and join the step thread."""
        with self._lock:
            self._stopping = True
            for request_id in list(self._live):
                self._abort_locked(request_id)
            self._wake.notify()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        with self._lock:  # the thread is gone: hand the slots of aborted requests back
            self._apply_executor_work_locked()

    # -- requests ------------------------------------------------------------------------

    def submit(
        self, request_id: str, prompt_ids: Sequence[int], params: SamplingParams
    ) -> RequestStream:
        """Queue a request; iterate the returned stream for its tokens. Call it from the
        consumer's event loop to get an async stream."""
        limit = self.executor.max_context
        if len(prompt_ids) + params.max_tokens > limit:
            raise InvalidInput(
                f"prompt ({len(prompt_ids)} tokens) + max_tokens ({params.max_tokens}) "
                f"exceeds the model's context of {limit} tokens"
            )
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        prompt = list(prompt_ids)
        live = _Live(
            stream=RequestStream(request_id, loop),
            sampler=Sampler(params),
            detokenizer=IncrementalDetokenizer(self.executor.tokenizer, prompt, params.stop),
            prompt_ids=prompt,
            submitted_s=time.monotonic(),
        )
        with self._lock:
            if self._stopping or self._error is not None:
                raise Unavailable("the generation engine is not running", reason="engine_stopped")
            if request_id in self._live:
                raise InvalidInput(f"request {request_id!r} is already running")
            # the scheduler's refusals (e.g. over the KV budget) reach the caller as is
            self.scheduler.add(SequenceRequest(request_id, len(prompt), params.max_tokens))
            self._live[request_id] = live
            self._to_add.append((request_id, prompt))
            self._prompt_tokens += len(prompt)
            self._wake.notify()
        return live.stream

    def abort(self, request_id: str) -> bool:
        """End a request now (its stream gets a final "abort" event); False if unknown."""
        with self._lock:
            return self._abort_locked(request_id)

    def stats(self) -> EngineStats:
        with self._lock:
            s = self.scheduler
            return EngineStats(
                num_running=s.num_running,
                num_waiting=s.num_waiting,
                kv_usage_ratio=s.kv_usage_ratio,
                num_preemptions=s.num_preemptions,
                prompt_tokens_total=self._prompt_tokens,
                generation_tokens_total=self._generation_tokens,
            )

    @property
    def penalty_rows(self) -> int:
        """Rows of penalty counts held: one per live request with penalties that has run
        a step (each is given back when its request ends)."""
        with self._lock:
            return self._counts.rows_in_use

    def _abort_locked(self, request_id: str) -> bool:
        if self.scheduler.abort(request_id) is None:
            return False
        self._finish_locked(request_id, TokenEvent(None, "", "abort"))
        return True

    def _finish_locked(self, request_id: str, event: TokenEvent, *, free_now: bool = False) -> None:
        """End the request's stream. The step thread frees its executor slot before the
        final event is seen (`free_now`); other threads defer the free to the next step,
        because the executor may be mid-forward outside the lock."""
        live = self._live.pop(request_id)
        self._counts.release(live.sampler)
        if free_now:
            self.executor.free(request_id)
        else:
            self._to_free.append(request_id)
        live.stream.finished = True
        live.stream.put(event)

    # -- the step thread -----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._step():
                pass
        except BaseException as exc:  # end every stream once, even when the model fails
            with self._lock:
                self._error = exc
                for request_id in list(self._live):
                    self.scheduler.abort(request_id)
                    self._finish_locked(request_id, TokenEvent(None, "", "error"))
            raise

    def _step(self) -> bool:
        with self._lock:
            while not self._stopping and not self.scheduler.has_unfinished:
                self._apply_executor_work_locked()
                self._wake.wait()
            if self._stopping and not self.scheduler.has_unfinished:
                return False
            self._apply_executor_work_locked()
            out = self.scheduler.schedule()
            now = time.monotonic()
            for chunk in out.chunks:
                live = self._live.get(chunk.request_id)
                if live is not None and live.queued_s is None:
                    live.queued_s = now - live.submitted_s
        sampled: list[str] = []  # requests given a token that does not end them
        if out.chunks:
            for logits in self.executor.forwards(out):
                with self._lock:  # publish a token as soon as its forward is done
                    self._sample_locked(logits, sampled)
        with self._lock:
            # the tokens that end a request were applied by `finish_in_step` already
            ended = self.scheduler.update(StepResult(tuple(SequenceOutput(r) for r in sampled)))
            if ended:  # the engine's and the scheduler's ideas of "last token" differ
                raise RuntimeError(f"requests ended outside the step's sampling: {ended}")
        return True

    def _sample_locked(self, logits: dict[str, torch.Tensor], sampled: list[str]) -> None:
        """Sample one forward's rows and publish each token at once. A token that ends its
        request first frees the request's scheduler entry and KV slot, so by the time a
        client sees its last event the capacity is back (a client that resubmits at once
        finds the slot free); the step's later forwards do not delay it."""
        rows = [(rid, row) for rid, row in logits.items() if rid in self._live]
        tokens = sample_rows(
            [self._live[rid].sampler for rid, _ in rows], [r for _, r in rows], self._counts
        )
        for (request_id, row), token in zip(rows, tokens, strict=True):
            live = self._live[request_id]  # not aborted while the model ran
            k = live.sampler.params.logprobs
            logprob = None if k is None else token_logprobs(row, token, k)
            self.executor.append_token(request_id, token)
            self._generation_tokens += 1
            eos = token == self.executor.eos_token_id and not live.sampler.params.ignore_eos
            if eos:
                delta_text, stopped, stop_string = "", True, False
            else:
                delta = live.detokenizer.add(token)
                delta_text, stopped = delta.text, delta.stopped
                stop_string = stopped
            queued = self._queue_report(live)
            if stopped or self.scheduler.samples_last_token(request_id):
                # its last token: the request leaves the scheduler and its KV slot now
                # (no later forward of this step uses the slot), then its stream ends
                done = self.scheduler.finish_in_step(request_id, stopped=stopped)
                reason = _FINISH_REASONS[done.status]
                if not stop_string:
                    # Text held back as the possible start of a stop string that never
                    # completed is the model's text: an EOS or the length limit ends the
                    # request, so it goes out now (only a matched stop string cuts).
                    delta_text += live.detokenizer.flush()
                event = TokenEvent(token, delta_text, reason, queued_s=queued, logprob=logprob)
                self._finish_locked(request_id, event, free_now=True)
                continue
            sampled.append(request_id)
            live.stream.put(TokenEvent(token, delta_text, queued_s=queued, logprob=logprob))

    @staticmethod
    def _queue_report(live: _Live) -> float | None:
        if live.reported_queue:
            return None
        live.reported_queue = True
        return live.queued_s

    def _apply_executor_work_locked(self) -> None:
        # cheap bookkeeping only (no forward): safe under the lock
        for request_id in self._to_free:
            self.executor.free(request_id)
        self._to_free.clear()
        for request_id, prompt in self._to_add:
            if request_id in self._live:
                self.executor.add_sequence(request_id, prompt)
        self._to_add.clear()
