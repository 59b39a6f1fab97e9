"""Any text engine as a served model: `EngineWorker` implements `engine.Worker` over an
`EngineClient`, so the repository, the lifecycle and Triton's extensions treat every
engine alike and no engine needs to know about them.

It keeps only what the `Worker` protocol reads and an engine need not: sequences in
flight (admitted, not closed), the watchdog's heartbeat (time since any in-flight
sequence last produced an event), the last device error (a sequence that finished with
`finish_reason="error"`), and idleness for the drain. Queue depth and saturation come
from the engine's own `stats()`; every admission decision stays the engine's (`admit`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from podserve.config.model_config import ModelConfig
from podserve.core.clock import Clock
from podserve.core.errors import InvalidInput
from podserve.core.tensors import InferRequest, InferResponse, TensorSpec
from podserve.core.triton import Duration, ModelStatistics
from podserve.generation.client import EngineClient, TokenStream
from podserve.generation.engine import EngineStats
from podserve.generation.sampling import SamplingParams
from podserve.generation.stream import TokenEvent


@dataclass(frozen=True, slots=True)
class EngineLimits:
    max_queue: int
    max_batch_time_s: float


class EngineWorker:
    """One loaded text engine as the repository keeps it; `generator` is itself."""

    def __init__(
        self, *, config: ModelConfig, client: EngineClient, max_queue: int, clock: Clock
    ) -> None:
        self.name = config.name
        self.version = config.version
        self.client = client
        self.limits = EngineLimits(max_queue, config.limits.max_batch_time_s)
        self._clock = clock
        self._inflight = 0
        self._last_event_s = clock.now_s()
        self._idle = asyncio.Event()
        self._idle.set()
        self.last_device_error: str | None = None

    # --- Worker ---------------------------------------------------------------------------
    @property
    def inflight(self) -> int:
        return self._inflight

    @property
    def queue_depth(self) -> int:
        return self.client.stats().num_waiting

    @property
    def saturated(self) -> bool:
        return self.queue_depth >= self.limits.max_queue

    @property
    def inputs(self) -> tuple[TensorSpec, ...]:
        return ()  # text in, text out: no OIP tensor metadata

    @property
    def outputs(self) -> tuple[TensorSpec, ...]:
        return ()

    @property
    def dynamic_batching(self) -> bool:
        return False

    @property
    def generator(self) -> EngineClient:
        return self

    def longest_busy_s(self) -> float:
        if self._inflight == 0:
            return 0.0
        return self._clock.now_s() - self._last_event_s

    def statistics(self) -> ModelStatistics:
        # Text engines count nothing in Triton's tensor statistics; their token
        # histograms are on /metrics.
        zero = Duration
        return ModelStatistics(self.name, self.version, 0, 0, 0, zero(), zero(), zero(), zero(), ())

    async def infer(self, request: InferRequest) -> InferResponse:
        raise InvalidInput(
            f"model {self.name!r} generates text: use /v1/completions, /v1/chat/completions "
            f"or /v2/models/{self.name}/generate"
        )

    async def wait_idle(self) -> None:
        await self._idle.wait()

    def close(self) -> None:
        self.client.close()

    # --- EngineClient, delegated ----------------------------------------------------------
    @property
    def max_context(self) -> int:
        return self.client.max_context

    def encode_prompt(self, text: str) -> list[int]:
        return self.client.encode_prompt(text)

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        return self.client.encode_chat(messages)

    def token_text(self, token_id: int) -> str:
        return self.client.token_text(token_id)

    def stats(self) -> EngineStats:
        return self.client.stats()

    def admit(
        self, prompt_ids: Sequence[int], sequences: Sequence[SamplingParams]
    ) -> list[TokenStream]:
        # A request that named no max_tokens asks for "until the context is full": every
        # engine gets a max_tokens that fits its context (one with a cap lowers it more).
        context = self.client.max_context
        sequences = [params.fitted(len(prompt_ids), context) for params in sequences]
        streams = self.client.admit(prompt_ids, sequences)  # refusals raise here
        return [_Tracked(self, stream) for stream in streams]

    # --- accounting, called by the streams ------------------------------------------------
    def _started(self) -> None:
        if self._inflight == 0:
            self._last_event_s = self._clock.now_s()
        self._inflight += 1
        self._idle.clear()

    def _event(self, event: TokenEvent) -> None:
        self._last_event_s = self._clock.now_s()
        if event.finish_reason == "error":
            self.last_device_error = "the generation step failed"

    def _ended(self) -> None:
        self._inflight -= 1
        if self._inflight == 0:
            self._idle.set()


class _Tracked:
    """An engine's stream, counted in flight until it is closed or exhausted."""

    __slots__ = ("_closed", "_loop", "_stream", "_worker")

    def __init__(self, worker: EngineWorker, stream: TokenStream) -> None:
        self._worker = worker
        self._stream = stream
        self._closed = False
        try:
            self._loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self._loop = None
        worker._started()

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self

    async def __anext__(self) -> TokenEvent:
        try:
            event = await self._stream.__anext__()
        except BaseException:  # the end, or the consumer cancelled: settle now
            self.close()
            raise
        self._worker._event(event)
        return event

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._stream.close()  # aborts the sequence in the engine if it still runs
        finally:
            self._worker._ended()

    def __del__(self) -> None:
        # Admitted but never read nor closed (its consumer vanished): settle it on the
        # loop, never on whichever thread runs the collection (as generation/worker.py).
        if not self._closed and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the process exits
                self._loop.call_soon_threadsafe(self.close)
