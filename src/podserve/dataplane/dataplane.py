"""The data plane: what an inference request goes through once decoded, whatever the
transport. REST and gRPC both call `DataPlane`, so drain, admission, deadlines and
metrics behave identically on both."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Coroutine
from typing import Any

import podserve
from podserve.config.settings import ServerSettings
from podserve.core.clock import Clock
from podserve.core.errors import (
    Cancelled,
    DeadlineExceeded,
    Draining,
    InvalidInput,
    ModelNotFound,
    PodserveError,
    Unavailable,
)
from podserve.core.tensors import InferRequest, InferResponse
from podserve.core.triton import ModelStatistics
from podserve.dataplane import triton
from podserve.dataplane.streams import GenerationStream
from podserve.dataplane.types import (
    HealthReport,
    ModelConfigView,
    ModelMetadata,
    RepositoryEntry,
    ServerMetadata,
)
from podserve.generation.sampling import SamplingParams
from podserve.generation.service import GenerativeWorker
from podserve.lifecycle import Lifecycle
from podserve.obs.metrics import Metrics
from podserve.obs.payloads import PayloadLogger
from podserve.repository import ModelRepository, ModelState

log = logging.getLogger("podserve.dataplane")

EXTENSIONS = (
    "binary_tensor_data",
    "model_repository",
    "schedule_policy",
    "model_configuration",
    "statistics",
)


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
    ) -> None:
        self.payloads = payloads
        self.settings = settings
        self.repository = repository
        self.lifecycle = lifecycle
        self.metrics = metrics
        self._clock = clock

    # --- health ----------------------------------------------------------------------
    def live(self) -> HealthReport:
        return self.lifecycle.live()

    def ready(self) -> HealthReport:
        report = self.lifecycle.ready()
        self.metrics.ready.set(1 if report.ok else 0)
        return report

    def startup(self) -> HealthReport:
        return self.lifecycle.startup()

    # --- metadata --------------------------------------------------------------------
    def server_metadata(self) -> ServerMetadata:
        return ServerMetadata(name="podserve", version=podserve.__version__, extensions=EXTENSIONS)

    def model_ready(self, name: str, version: str | None = None) -> bool:
        return self.repository.entry(name, version).state is ModelState.READY

    def model_metadata(self, name: str, version: str | None = None) -> ModelMetadata:
        entry = self.repository.entry(name, version)
        config = entry.config
        worker = entry.worker
        if isinstance(worker, GenerativeWorker):
            inputs, outputs = worker.model_inputs, worker.model_outputs
        else:
            inputs = worker.model.inputs if worker else config.input_specs()
            outputs = worker.model.outputs if worker else config.output_specs()
        return ModelMetadata(
            name=config.name,
            versions=tuple(self.repository.versions(name)),
            platform=config.platform or config.runtime,
            inputs=inputs,
            outputs=outputs,
        )

    # --- inference -------------------------------------------------------------------
    def deadline_for(self, request: InferRequest, header_timeout_ms: str | None) -> float | None:
        """The absolute deadline from, in order: the `timeout` parameter (seconds, as
        KServe), the x-request-timeout-ms header, the model's then the server's default."""
        timeout_s: float | None = None
        raw = request.parameters.get("timeout")
        if raw is not None:
            timeout_s = _positive_float(raw, "parameters.timeout (seconds)")
        elif header_timeout_ms is not None:
            timeout_s = _positive_float(header_timeout_ms, "x-request-timeout-ms header") / 1000
        else:
            with contextlib.suppress(ModelNotFound):
                entry = self.repository.entry(request.model_name, request.model_version)
                timeout_s = entry.config.limits.default_timeout_s
            timeout_s = timeout_s or self.settings.default_timeout_s
        if request.deadline_s is not None:
            # A transport deadline (gRPC) is already absolute; keep the earlier of both.
            own = None if timeout_s is None else self._clock.now_s() + timeout_s
            return request.deadline_s if own is None else min(own, request.deadline_s)
        return None if timeout_s is None else self._clock.now_s() + timeout_s

    async def infer(
        self,
        request: InferRequest,
        *,
        endpoint: str,
        disconnected: asyncio.Event | None = None,
        request_id: str | None = None,
    ) -> InferResponse:
        model = request.model_name
        if self.lifecycle.draining:
            self._reject(model, "draining")
            raise Draining()
        self.lifecycle.request_started()
        try:
            try:
                worker = await self.repository.acquire_worker(model, request.model_version)
            except Unavailable as exc:
                self._reject(model, exc.reason)
                raise
            if isinstance(worker, GenerativeWorker):
                raise InvalidInput(
                    f"model {model!r} generates text: use /v1/completions or /v1/chat/completions"
                )
            try:
                if disconnected is None:
                    response = await worker.infer(request)
                else:
                    response = await _race_disconnect(worker.infer(request), disconnected)
            except Unavailable as exc:
                self._reject(model, exc.reason)
                raise
            except DeadlineExceeded:
                self._reject(model, "deadline")
                raise
            if self.payloads is not None:
                self.payloads.offer(request, response, request_id or request.id or "", endpoint)
            return response
        finally:
            self.lifecycle.request_finished()

    # --- generation --------------------------------------------------------------------
    async def generative_worker(self, model: str) -> GenerativeWorker:
        """The loaded generative model (loading it first with autoload)."""
        if self.lifecycle.draining:
            self._reject(model, "draining")
            raise Draining()
        try:
            worker = await self.repository.acquire_worker(model)
        except Unavailable as exc:
            self._reject(model, exc.reason)
            raise
        if not isinstance(worker, GenerativeWorker):
            raise InvalidInput(
                f"model {model!r} is not a generative model; use /v2/models/{model}/infer"
            )
        return worker

    def generate(
        self,
        worker: GenerativeWorker,
        prompt_ids: list[int],
        sequences: list[SamplingParams],
    ) -> list[GenerationStream]:
        """Admit one generation request of one or more sequences (OpenAI's `n`: one
        `SamplingParams` each), all or none, raising before any byte is sent; return a
        token stream per sequence. Each counts as in flight for the drain until closed."""
        if self.lifecycle.draining:
            self._reject(worker.name, "draining")
            raise Draining()
        try:  # the sequences share the prompt and max_tokens: one check for all
            worker.check(prompt_ids, sequences[0], copies=len(sequences))
        except Unavailable as exc:
            self._reject(worker.name, exc.reason)
            raise
        streams = []
        for one in sequences:
            self.lifecycle.request_started()
            streams.append(
                GenerationStream(worker.generate(prompt_ids, one), self.lifecycle.request_finished)
            )
        return streams

    def refresh_generation_gauges(self) -> None:
        for worker in self.repository.workers():
            if isinstance(worker, GenerativeWorker):
                worker.refresh_gauges()

    def _reject(self, model: str, reason: str) -> None:
        self.metrics.rejected.labels(model, reason).inc()

    # --- repository extension --------------------------------------------------------
    def repository_index(self, ready_only: bool = False) -> list[RepositoryEntry]:
        rows = []
        for entry in self.repository.entries():
            if ready_only and entry.state is not ModelState.READY:
                continue
            state = "UNAVAILABLE" if entry.state is ModelState.FAILED else entry.state.value
            rows.append(RepositoryEntry(entry.name, entry.config.version, state, entry.error or ""))
        return rows

    # --- Triton's model configuration and statistics extensions ----------------------
    def model_config(self, name: str, version: str | None = None) -> ModelConfigView:
        return triton.model_config(self.repository, name, version)

    def model_statistics(
        self, name: str | None = None, version: str | None = None
    ) -> list[ModelStatistics]:
        return triton.model_statistics(self.repository, name, version)

    async def load_model(self, name: str) -> None:
        if self.lifecycle.draining:
            raise Draining()
        await self.repository.load(name)

    async def unload_model(self, name: str) -> None:
        await self.repository.unload(name)


async def _race_disconnect(
    work: Coroutine[Any, Any, InferResponse], gone: asyncio.Event
) -> InferResponse:
    """Run `work` until it finishes or the client goes; then cancel it (a queued request
    leaves the queue at once)."""
    task = asyncio.ensure_future(work)
    watcher = asyncio.ensure_future(gone.wait())
    try:
        await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, PodserveError):
        await task
    raise Cancelled("client disconnected; request cancelled")


def _positive_float(raw: object, what: str) -> float:
    try:
        value = float(raw)  # type: ignore[arg-type]  # validated right here
    except (TypeError, ValueError):
        raise InvalidInput(f"{what} must be a number, got {raw!r}") from None
    if value <= 0:
        raise InvalidInput(f"{what} must be positive, got {raw!r}")
    return value
