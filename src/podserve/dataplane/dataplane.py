"""The data plane: what a request goes through once decoded, whatever the transport.

REST, gRPC and in-process callers (the stream consumer) call the methods of `DataPlane`
with typed requests (`core.tensors.InferRequest`, `dataplane.types.GenerateRequest`)
and a `CallContext`, and get typed results or a `core.errors` exception. Everything that
must behave the same on every edge happens here, once:

- drain: refuse new work after SIGTERM (counted as `rejected{reason="draining"}`,
  `dataplane/gate.py`), count what is in flight so the drain can wait for it;
- deadlines (`dataplane/deadlines.py`): request parameter, header, transport deadline,
  model and server defaults;
- admission: early refusals before a body is decoded (`dataplane/gate.py`), the
  worker's own (queue bound, rows, declared inputs) for tensors, and
  `EngineClient.admit` for generation, all before any byte of a response;
- cancellation: task cancellation (see `CallContext`);
- accounting: rejections by reason, request totals and durations by final status,
  payload logging;
- shared memory: the process's table of registered regions (Triton's system
  shared-memory extension), which the edges' decoders read inputs from; outputs a
  request placed in a region are written there once computed, and every region is
  unmapped at shutdown.

The edges decode, call one method, encode. They never reach the repository, the
settings or the metrics registry: what they need is a method here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

import podserve
from podserve.admission import Reservation
from podserve.config.model_config import ModelConfig
from podserve.config.settings import ServerSettings
from podserve.core.clock import Clock
from podserve.core.errors import DeadlineExceeded, Draining, InvalidInput, Unavailable
from podserve.core.health import HealthReport
from podserve.core.tensors import InferRequest, InferResponse
from podserve.core.triton import ModelConfigView, ModelStatistics
from podserve.dataplane import triton
from podserve.dataplane.deadlines import deadline_s
from podserve.dataplane.gate import AdmissionGate
from podserve.dataplane.model_control import ModelControl
from podserve.dataplane.prompts import Tokenizing, check_prompt_size
from podserve.dataplane.rows import check_rows
from podserve.dataplane.serving_state import serving_state
from podserve.dataplane.streams import GenerationDeadline, GenerationStream
from podserve.dataplane.types import (
    CallContext,
    GenerateRequest,
    Generation,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)
from podserve.generation.registry import is_generative
from podserve.lifecycle import Lifecycle
from podserve.obs.collector import ServingState
from podserve.obs.metrics import EXPOSITION_CONTENT_TYPE, Metrics
from podserve.obs.payloads import PayloadLogger
from podserve.protocol.v2.shared_memory import owned, write_outputs
from podserve.repository import ModelRepository, ModelState
from podserve.shm import CudaSharedMemory, SystemSharedMemory

log = logging.getLogger("podserve.dataplane")

# Exactly what is implemented: no cuda_shared_memory, whose registration always fails on
# a machine without GPUs (its endpoints still answer, as a CPU-only Triton's do).
EXTENSIONS = (
    "binary_tensor_data",
    "model_repository",
    "schedule_policy",
    "model_configuration",
    "statistics",
    "system_shared_memory",
    "generate",
)
_NO_CONTEXT = CallContext()


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    """The few settings an edge applies itself, before the data plane sees a request."""

    max_body_bytes: int
    access_log_sample_rate: float


class DataPlane:
    def __init__(
        self,
        *,
        settings: ServerSettings,
        repository: ModelRepository,
        lifecycle: Lifecycle,
        metrics: Metrics,
        clock: Clock,
        payloads: PayloadLogger | None = None,
        shared_memory: SystemSharedMemory | None = None,
    ) -> None:
        self._settings = settings
        self._repository = repository
        self._lifecycle = lifecycle
        self._metrics = metrics
        self._clock = clock
        self._payloads = payloads
        self._tokenizing = Tokenizing()
        self._model_control = ModelControl(settings.model_control_mode, settings.admin_token)
        self._gate = AdmissionGate(
            repository=repository,
            lifecycle=lifecycle,
            metrics=metrics,
            clock=clock,
            model_control=self._model_control,
        )
        self.edge = EdgeLimits(
            max_body_bytes=settings.max_body_bytes,
            access_log_sample_rate=settings.access_log_sample_rate,
        )
        self.shared_memory = shared_memory or SystemSharedMemory(
            max_regions=settings.max_shm_regions
        )
        self.cuda_shared_memory = CudaSharedMemory(self.shared_memory)

    # --- health ----------------------------------------------------------------------
    def live(self) -> HealthReport:
        return self._lifecycle.live()

    def ready(self) -> HealthReport:
        return self._lifecycle.ready()

    def startup(self) -> HealthReport:
        return self._lifecycle.startup()

    # --- metadata --------------------------------------------------------------------
    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata(name="podserve", version=podserve.__version__, extensions=EXTENSIONS)

    def check_model(self, name: str, version: str | None = None) -> None:
        """Raise ModelNotFound for an unknown model or version (an edge calls this to
        answer 404 before a body costs any decoding)."""
        self._repository.entry(name, version)

    def is_generative(self, name: str, version: str | None = None) -> bool:
        """Whether the model generates text (its requests go to `generate`)."""
        return is_generative(self._repository.entry(name, version).config.runtime)

    def model_ready(self, name: str, version: str | None = None) -> bool:
        return self._repository.entry(name, version).state is ModelState.READY

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        entry = self._repository.entry(name, version)
        config = entry.config
        worker = entry.worker
        return ModelMetadata(
            name=config.name,
            versions=tuple(self._repository.versions(name)),
            platform=config.platform or config.runtime,
            inputs=worker.inputs if worker else config.input_specs(),
            outputs=worker.outputs if worker else config.output_specs(),
        )

    def served_model_names(self) -> list[str]:
        """Models a client may name now: the loaded ones, or every known one with
        autoload (OpenAI's `/v1/models`)."""
        autoload = self._settings.autoload
        return sorted(
            {e.name for e in self._repository.entries() if autoload or e.state is ModelState.READY}
        )

    # --- inference -------------------------------------------------------------------
    async def infer(self, request: InferRequest, call: CallContext = _NO_CONTEXT) -> InferResponse:
        """Run one tensor request. Raises only `core.errors` exceptions (and
        CancelledError when the caller cancels)."""
        model = request.model_name
        self._gate.refuse_if_draining(model)
        entry = self._repository.entry(model, request.model_version)
        check_rows(request)
        deadline = self._deadline_s(entry.config, request.parameters, call)
        if request.deadline_s is not None:  # an in-process caller's own
            deadline = request.deadline_s if deadline is None else min(deadline, request.deadline_s)
        if deadline != request.deadline_s:
            request = _with_deadline(request, deadline)
        self._lifecycle.request_started()
        try:
            worker = await self._gate.acquire(model, request.model_version)
            try:
                if call.reservation is not None:
                    # Give the promised slot back and take the queue's in the same step:
                    # worker.infer admits synchronously, before its first await.
                    call.reservation.release()
                response = await worker.infer(request)
                self._gate.completed(model)
            except Unavailable as exc:
                self._gate.reject(model, exc.reason)
                raise
            except DeadlineExceeded:
                self._gate.reject(model, "deadline")
                raise
            response = write_outputs(self.shared_memory, request, response)
            if self._payloads is not None:
                self._payloads.offer(
                    owned(request), response, call.request_id or request.id or "", call.endpoint
                )
            return response
        finally:
            self._lifecycle.request_finished()

    async def generate(
        self, request: GenerateRequest, call: CallContext = _NO_CONTEXT
    ) -> Generation:
        """Admit one generation request, all sequences or none, and return their token
        streams. Every refusal (draining, unknown model, not generative, a bad or passed
        deadline, a prompt that can never fit, a full queue) raises here, before the
        caller sends anything. The deadline is `infer`'s (same sources, same rules); if
        it passes after admission, the streams end with `DeadlineExceeded`
        (`dataplane/streams.py`)."""
        model = request.model
        self._gate.refuse_if_draining(model)
        entry = self._repository.entry(model, request.version)
        deadline = self._deadline_s(entry.config, request.parameters, call)
        self._refuse_if_expired(model, deadline)
        worker = await self._gate.acquire(model, request.version)
        client = worker.generator
        if client is None:
            raise InvalidInput(
                f"model {model!r} is not a generative model; use /v2/models/{model}/infer"
            )
        # bounded before, and tokenized off, the event loop (dataplane/prompts.py)
        check_prompt_size(request.prompt, request.messages, client.max_context)
        if request.messages is not None:
            prompt_ids = await self._tokenizing.run(client.encode_chat, request.messages)
        else:
            prompt_ids = await self._tokenizing.run(client.encode_prompt, request.prompt or "")
        self._gate.refuse_if_draining(model)  # the model may have loaded while the drain began
        # a model load or the tokenizer may have taken the time left
        self._refuse_if_expired(model, deadline)
        try:
            sequences = client.admit(prompt_ids, request.sequences)
        except Unavailable as exc:
            self._gate.reject(model, exc.reason)
            raise
        expiry = None
        if deadline is not None:
            expiry = GenerationDeadline(
                deadline, self._clock, lambda: self._gate.reject(model, "deadline")
            )
        streams = []
        for sequence in sequences:
            self._lifecycle.request_started()
            streams.append(
                GenerationStream(sequence, lambda: self._sequence_finished(model), expiry)
            )
        if expiry is not None:
            expiry.arm()
        return Generation(model, worker.version, len(prompt_ids), streams, client.token_text)

    def _deadline_s(
        self, config: ModelConfig, parameters: Mapping[str, Any], call: CallContext
    ) -> float | None:
        """The request's deadline on the data plane's clock (dataplane/deadlines.py: the
        `timeout` parameter, the header, the model's then the server's default, and the
        transport's); a nonsense value is InvalidInput."""
        return deadline_s(
            now_s=self._clock.now_s(),
            parameters=parameters,
            timeout_ms=call.timeout_ms,
            client_timeout_s=call.client_timeout_s,
            default_timeout_s=config.limits.default_timeout_s or self._settings.default_timeout_s,
        )

    def _refuse_if_expired(self, model: str, deadline: float | None) -> None:
        # the tensor worker's words for the same refusal (engine/model_worker.py)
        if deadline is not None and self._clock.now_s() >= deadline:
            self._gate.reject(model, "deadline")
            raise DeadlineExceeded("request deadline passed before it was queued; not computed")

    def _sequence_finished(self, model: str) -> None:
        self._lifecycle.request_finished()
        self._gate.completed(model)

    def refuse_early(self, model: str, version: str | None = None) -> None:
        """Refuse before an edge decodes the body (`AdmissionGate.refuse_early`)."""
        self._gate.refuse_early(model, version)

    def admit_early(self, model: str, version: str | None = None) -> Reservation | None:
        """`refuse_early` and a promised queue slot (`AdmissionGate.admit_early`)."""
        return self._gate.admit_early(model, version)

    # --- accounting --------------------------------------------------------------------
    def record_request(self, model: str, endpoint: str, code: str, duration_s: float) -> None:
        """Count one finished request by its final status (`code`: the HTTP status, or
        its equivalent for other edges). Only known models become label values: a typo
        in a URL must not mint a series."""
        label = model if self._repository.knows(model) else ""
        self._metrics.requests.labels(label, endpoint, code).inc()
        self._metrics.request_duration.labels(label, endpoint).observe(duration_s)

    def metrics_exposition(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return self._metrics.render(), EXPOSITION_CONTENT_TYPE

    def serving_state(self) -> ServingState:
        """What the state gauges report, read at scrape time (`obs/collector.py`)."""
        return serving_state(self._repository, self._lifecycle)

    # --- repository extension --------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        rows = []
        for entry in self._repository.entries():
            if ready_only and entry.state is not ModelState.READY:
                continue
            state = "UNAVAILABLE" if entry.state is ModelState.FAILED else entry.state.value
            rows.append(RepositoryEntry(entry.name, entry.config.version, state, entry.error or ""))
        return rows

    async def load_model(self, name: str, call: CallContext | None = None) -> None:
        """Load a model. An edge passes its call, which must be allowed to
        (dataplane/model_control.py); None is the process itself."""
        self._model_control.authorize(call)
        if self._lifecycle.draining:
            raise Draining()
        # Recorded by the load itself: a caller cut short never gets past this await.
        await self._repository.load(name, on_success=partial(self._model_control.loaded, name))

    async def unload_model(self, name: str, call: CallContext | None = None) -> None:
        self._model_control.authorize(call)
        await self._repository.unload(name, on_success=partial(self._model_control.unloaded, name))

    # --- Triton's model configuration and statistics extensions ----------------------
    def model_config(self, name: str, version: str | None = None) -> ModelConfigView:
        return triton.model_config(self._repository, name, version)

    def model_statistics(
        self, name: str | None = None, version: str | None = None
    ) -> list[ModelStatistics]:
        return triton.model_statistics(self._repository, name, version)

    # --- the process: loading, drain, shutdown -----------------------------------------
    async def load_preloaded(self) -> None:
        """Load every preload model, then mark loading finished (for /startup)."""
        try:
            await self._repository.load_preloaded()
        finally:
            self._lifecycle.loading_finished()

    @property
    def draining(self) -> bool:
        return self._lifecycle.draining

    @property
    def inflight(self) -> int:
        """Requests and generation streams admitted and not finished, on every edge."""
        return self._lifecycle.inflight

    def begin_drain(self) -> None:
        """Refuse new work from now on (readiness fails at once)."""
        self._lifecycle.begin_drain()

    async def drain(self, timeout_s: float) -> int:
        """Wait until nothing is in flight, at most `timeout_s`; return how many requests
        were still in flight when it gave up (0: a clean drain), counted as cut."""
        try:
            await asyncio.wait_for(self._lifecycle.wait_empty(), timeout=timeout_s)
        except TimeoutError:
            cut = self._lifecycle.inflight
            self._metrics.drain_cut.inc(cut)
            return cut
        return 0

    def stop(self) -> None:
        self._lifecycle.stop()

    async def close(self) -> None:
        """Unmap every shared-memory region and flush what the data plane buffers (the
        payload log)."""
        self.shared_memory.close()
        self._tokenizing.close()
        if self._payloads is not None:
            await asyncio.to_thread(self._payloads.close)


def _with_deadline(request: InferRequest, deadline: float | None) -> InferRequest:
    return InferRequest(
        model_name=request.model_name,
        inputs=request.inputs,
        id=request.id,
        model_version=request.model_version,
        outputs=request.outputs,
        parameters=request.parameters,
        deadline_s=deadline,
    )
