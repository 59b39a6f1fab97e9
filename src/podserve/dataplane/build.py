"""Build a data plane from settings: discover models, wire workers, repository,
lifecycle, metrics and payload log. Used by the server process and by any in-process
caller (the stream consumer), which need no HTTP to serve models."""

from __future__ import annotations

import asyncio

from podserve.config.model_config import ModelConfig
from podserve.config.settings import ServerSettings
from podserve.core.clock import MONOTONIC, Clock
from podserve.dataplane.dataplane import DataPlane
from podserve.engine import ModelWorker, Worker, WorkerLimits
from podserve.generation.client import EngineClient
from podserve.generation.registry import EngineServices, is_generative
from podserve.generation.served import EngineWorker
from podserve.lifecycle import Lifecycle
from podserve.obs.metrics import Metrics
from podserve.obs.payload_sinks import HttpCloudEventsSink, JsonlFileSink
from podserve.obs.payloads import PayloadLogger, PayloadSink
from podserve.repository import ModelEntry, ModelRepository, RepositoryPolicy, discover_models
from podserve.runtimes import ModelAPI


def build_dataplane(
    settings: ServerSettings, loop: asyncio.AbstractEventLoop, clock: Clock = MONOTONIC
) -> DataPlane:
    """`clock`: every duration's source (tests pass a fake one)."""
    metrics = Metrics()
    configs = [
        with_generation_defaults(c, settings)
        for c in discover_models(settings.model_repository, settings.models)
    ]

    def make_worker(config: ModelConfig, model: ModelAPI | EngineClient) -> Worker:
        if not isinstance(model, ModelAPI):  # a text engine (generation/registry.py)
            return EngineWorker(
                config=config,
                client=model,
                max_queue=config.limits.max_queue or settings.max_queue,
                clock=clock,
            )
        limits = WorkerLimits(
            max_queue=config.limits.max_queue or settings.max_queue,
            max_batch_time_s=config.limits.max_batch_time_s,
            ready_high_watermark=settings.ready_high_watermark,
            ready_low_watermark=settings.ready_low_watermark,
        )
        return ModelWorker(
            config=config,
            model=model,
            limits=limits,
            metrics=metrics.for_model(config.name),
            clock=clock,
            loop=loop,
        )

    def on_loaded(entry: ModelEntry) -> None:
        version = entry.config.version
        metrics.load_seconds.labels(entry.name, version).set(entry.load_seconds or 0.0)
        metrics.load_duration.labels(entry.name).observe(entry.load_seconds or 0.0)

    def on_event(kind: str, entry: ModelEntry) -> None:
        if kind == "autoload":
            metrics.autoloads.labels(entry.name).inc()
        elif kind == "eviction":
            metrics.evictions.labels(entry.name).inc()

    repository = ModelRepository(
        configs,
        worker_factory=make_worker,
        clock=clock,
        policy=RepositoryPolicy(
            cache_dir=settings.cache_dir,
            autoload=settings.autoload,
            memory_budget_bytes=settings.memory_budget_bytes,
        ),
        on_loaded=on_loaded,
        on_event=on_event,
        engines=EngineServices(
            metrics=metrics.for_generation, clock=clock, default_max_queue=settings.max_queue
        ),
    )
    lifecycle = Lifecycle(repository, clock, load_stall_timeout_s=settings.load_stall_timeout_s)
    dataplane = DataPlane(
        settings=settings,
        repository=repository,
        lifecycle=lifecycle,
        metrics=metrics,
        clock=clock,
        payloads=build_payload_logger(settings, metrics),
    )
    metrics.watch(dataplane.serving_state)
    return dataplane


def with_generation_defaults(config: ModelConfig, settings: ServerSettings) -> ModelConfig:
    """Server-wide generation limits (`--max-concurrent-sequences`, `--max-context-tokens`,
    which `podserve render` sets from the spec) as defaults under a generative model's own
    parameters."""
    if not is_generative(config.runtime):
        return config
    defaults: dict[str, object] = {}
    if settings.max_concurrent_sequences is not None:
        defaults["max_num_seqs"] = settings.max_concurrent_sequences
    if settings.max_context_tokens is not None:
        defaults["max_context_tokens"] = settings.max_context_tokens
    return config.model_copy(update={"parameters": {**defaults, **config.parameters}})


def build_payload_logger(settings: ServerSettings, metrics: Metrics) -> PayloadLogger | None:
    sinks: list[PayloadSink] = []
    if settings.payload_log_file is not None:
        sinks.append(
            JsonlFileSink(settings.payload_log_file, max_bytes=settings.payload_log_file_max_bytes)
        )
    if settings.payload_log_url is not None:
        sinks.append(HttpCloudEventsSink(settings.payload_log_url))
    if not sinks or settings.payload_log_sample_rate <= 0:
        return None
    return PayloadLogger(
        sinks=sinks,
        sample_rate=settings.payload_log_sample_rate,
        redact=frozenset(settings.payload_log_redact),
        buffer_records=settings.payload_log_buffer_records,
        count=lambda result, n: metrics.payload_records.labels(result).inc(n),
    )
