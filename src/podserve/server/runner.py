"""The server process: build the pieces, serve HTTP and gRPC on one event loop, load
models in the background, and drain on SIGTERM (DESIGN.md §2).

SIGTERM: readiness fails at once; new inference gets 503 + Connection: close +
Retry-After; everything admitted (queued or running) finishes; the process exits when
nothing is in flight, or when drain_timeout_s expires (logging how many requests it cut,
exit code 1). A second SIGTERM or SIGINT exits at once. Probes answer throughout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import uvicorn

from podserve.config.model_config import ModelConfig
from podserve.config.settings import ServerSettings
from podserve.core.clock import MONOTONIC
from podserve.dataplane.dataplane import DataPlane
from podserve.engine import ModelWorker, WorkerLimits
from podserve.generation.loading import GENERATIVE_RUNTIMES, LoadedGenerator
from podserve.generation.service import GenerativeLimits, GenerativeWorker
from podserve.lifecycle import Lifecycle
from podserve.obs.metrics import Metrics
from podserve.obs.payload_sinks import HttpCloudEventsSink, JsonlFileSink
from podserve.obs.payloads import PayloadLogger, PayloadSink
from podserve.repository import (
    ModelEntry,
    ModelRepository,
    RepositoryPolicy,
    Worker,
    discover_models,
)
from podserve.runtimes import ModelAPI
from podserve.server.app import App

log = logging.getLogger("podserve.server")

EXIT_OK = 0
EXIT_CUT = 1


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handling: the runner owns SIGTERM/SIGINT."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(frozen=True, slots=True)
class Listening:
    http_port: int
    grpc_port: int | None


def build_dataplane(settings: ServerSettings, loop: asyncio.AbstractEventLoop) -> DataPlane:
    metrics = Metrics()
    configs = [
        with_generation_defaults(c, settings)
        for c in discover_models(settings.model_repository, settings.models)
    ]

    def make_worker(config: ModelConfig, model: ModelAPI | LoadedGenerator) -> Worker:
        if isinstance(model, LoadedGenerator):
            return GenerativeWorker(
                config=config,
                executor=model.executor,
                engine=model.engine,
                limits=GenerativeLimits(
                    max_queue=config.limits.max_queue or settings.max_queue,
                    max_tokens_cap=model.max_tokens_cap,
                    max_queued_prompt_tokens=model.max_queued_prompt_tokens,
                    max_batch_time_s=config.limits.max_batch_time_s,
                    max_num_seqs=model.max_num_seqs,
                ),
                metrics=metrics.for_generation(config.name),
                clock=MONOTONIC,
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
            clock=MONOTONIC,
            loop=loop,
        )

    def on_loaded(entry: ModelEntry) -> None:
        version = entry.config.version
        metrics.load_seconds.labels(entry.name, version).set(entry.load_seconds or 0.0)
        metrics.load_duration.labels(entry.name).observe(entry.load_seconds or 0.0)
        metrics.model_loaded.labels(entry.name, version).set(1)
        metrics.memory_used.set(repository.used_bytes())

    def on_event(kind: str, entry: ModelEntry) -> None:
        if kind == "autoload":
            metrics.autoloads.labels(entry.name).inc()
        elif kind == "eviction":
            metrics.evictions.labels(entry.name).inc()
            metrics.model_loaded.labels(entry.name, entry.version).set(0)

    repository = ModelRepository(
        configs,
        worker_factory=make_worker,
        clock=MONOTONIC,
        policy=RepositoryPolicy(
            cache_dir=settings.cache_dir,
            autoload=settings.autoload,
            memory_budget_bytes=settings.memory_budget_bytes,
        ),
        on_loaded=on_loaded,
        on_event=on_event,
    )
    lifecycle = Lifecycle(repository, MONOTONIC, load_stall_timeout_s=settings.load_stall_timeout_s)
    return DataPlane(
        settings=settings,
        repository=repository,
        lifecycle=lifecycle,
        metrics=metrics,
        clock=MONOTONIC,
        payloads=build_payload_logger(settings, metrics),
    )


def with_generation_defaults(config: ModelConfig, settings: ServerSettings) -> ModelConfig:
    """Server-wide generation limits (`--max-concurrent-sequences`, `--max-context-tokens`,
    which `podserve render` sets from the spec) as defaults under a generative model's own
    parameters."""
    if config.runtime not in GENERATIVE_RUNTIMES:
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


async def serve(
    settings: ServerSettings, on_listening: Callable[[Listening], None] | None = None
) -> int:
    loop = asyncio.get_running_loop()
    dataplane = build_dataplane(settings, loop)
    lifecycle = dataplane.lifecycle
    config = uvicorn.Config(
        App(dataplane),
        host=settings.host,
        port=settings.port,
        lifespan="off",
        log_config=None,
        access_log=False,
        server_header=False,
        # Exits happen only after our own drain, so uvicorn need not wait again.
        timeout_graceful_shutdown=1,
        limit_concurrency=None,
    )
    server = _Uvicorn(config)
    grpc_server = None
    grpc_port: int | None = None
    if settings.grpc_port >= 0:
        from podserve.server.grpc.server import start_grpc_server

        grpc_server, grpc_port = await start_grpc_server(
            dataplane, settings.host, settings.grpc_port, max_message_bytes=settings.max_body_bytes
        )

    exit_code = EXIT_OK
    signals_seen = 0
    drain_task: asyncio.Task[None] | None = None

    async def drain() -> None:
        nonlocal exit_code
        inflight = lifecycle.inflight
        log.info(
            "SIGTERM: draining",
            extra={"inflight": inflight, "drain_timeout_s": settings.drain_timeout_s},
        )
        try:
            await asyncio.wait_for(lifecycle.wait_empty(), timeout=settings.drain_timeout_s)
            log.info("drain complete; exiting")
        except TimeoutError:
            cut = lifecycle.inflight
            exit_code = EXIT_CUT
            dataplane.metrics.drain_cut.inc(cut)
            log.error(
                "drain timeout expired; cutting in-flight requests",
                extra={"cut_requests": cut, "drain_timeout_s": settings.drain_timeout_s},
            )
            server.force_exit = True
        server.should_exit = True

    def on_signal(signum: int) -> None:
        nonlocal signals_seen, drain_task, exit_code
        signals_seen += 1
        if signals_seen == 1 and signum == signal.SIGTERM:
            lifecycle.begin_drain()
            dataplane.metrics.draining.set(1)
            dataplane.metrics.ready.set(0)
            drain_task = asyncio.ensure_future(drain())
            return
        cut = lifecycle.inflight
        log.warning(
            "second signal or SIGINT: exiting now",
            extra={"signal": signal.Signals(signum).name, "cut_requests": cut},
        )
        if cut:
            exit_code = EXIT_CUT
        lifecycle.begin_drain()
        server.should_exit = server.force_exit = True

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)

    async def load_models() -> None:
        try:
            await dataplane.repository.load_preloaded()
        finally:
            lifecycle.loading_finished()

    # Bind before serving, so the port (even an ephemeral one) is known and connections
    # queue in the backlog from this moment.
    sock = config.bind_socket()
    sock.listen(config.backlog)
    http_port = sock.getsockname()[1]
    serve_task = asyncio.ensure_future(server.serve(sockets=[sock]))
    listening = Listening(http_port=http_port, grpc_port=grpc_port)
    log.info("podserve listening", extra={"http_port": http_port, "grpc_port": grpc_port})
    if on_listening is not None:
        on_listening(listening)
    loader = asyncio.ensure_future(load_models())
    try:
        await serve_task
    finally:
        lifecycle.stop()
        loader.cancel()
        if grpc_server is not None:
            from podserve.server.grpc.server import stop_grpc_server

            await stop_grpc_server(grpc_server, grace_s=0 if server.force_exit else 1.0)
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        if dataplane.payloads is not None:
            await asyncio.to_thread(dataplane.payloads.close)
    return exit_code
