"""The consumer process: build the data plane, load the models, serve /metrics, consume
until SIGTERM, then finish and acknowledge what was claimed and exit.

SIGTERM (Kubernetes' stop): stop reading at once (within one `block_ms`), let every
claimed entry run to its result and ack, exit 0; entries still running when
`drain_timeout_s` expires stay pending in Redis, where another consumer claims them, and
the exit code is 1. A second SIGTERM or SIGINT exits at once (the same holds for them).
"""

from __future__ import annotations

import asyncio
import logging
import signal
from dataclasses import dataclass

import redis.asyncio as aioredis

from podserve.config.settings import ServerSettings
from podserve.consume.consumer import Consumer, ConsumerPolicy
from podserve.consume.metrics import ConsumerMetrics, MetricsListener
from podserve.consume.streams import RedisStreams, StreamNames
from podserve.dataplane.build import build_dataplane

log = logging.getLogger("podserve.consume")

EXIT_OK = 0
EXIT_CUT = 1


@dataclass(frozen=True, slots=True)
class ConsumeSettings:
    redis_url: str
    names: StreamNames
    policy: ConsumerPolicy
    server: ServerSettings  # the models and their limits, as `podserve serve` takes them
    metrics_host: str = "0.0.0.0"
    metrics_port: int = 9100
    drain_timeout_s: float = 25.0
    redis_password: str | None = None
    # Sizes read_count/max_inflight from the models' batching once they are loaded.
    size_from_models: bool = True


def sized_policy(policy: ConsumerPolicy, batch_sizes: list[int]) -> ConsumerPolicy:
    """Read as many entries as the largest batch the models take (max_batch_size times
    instances), and keep two such batches in flight: one running, one forming."""
    largest = max([1, *batch_sizes])
    return ConsumerPolicy(
        read_count=largest,
        max_inflight=2 * largest,
        block_ms=policy.block_ms,
        claim_idle_ms=policy.claim_idle_ms,
        max_failures=policy.max_failures,
        state_interval_s=policy.state_interval_s,
    )


async def consume(settings: ConsumeSettings) -> int:
    loop = asyncio.get_running_loop()
    dataplane = build_dataplane(settings.server, loop)
    client = aioredis.Redis.from_url(settings.redis_url, password=settings.redis_password)
    streams = RedisStreams(client, settings.names)
    metrics = ConsumerMetrics(settings.names.requests, settings.names.group)

    def render() -> bytes:
        return metrics.exposition() + dataplane.metrics_exposition()[0]

    listener = MetricsListener(
        render,
        settings.metrics_host,
        settings.metrics_port,
        ready=lambda: consumer is not None and not stopping.is_set(),
    )
    await listener.start()
    consumer: Consumer | None = None
    stopping = asyncio.Event()
    signals_seen = 0
    force = asyncio.Event()

    def on_signal(signum: int) -> None:
        nonlocal signals_seen
        signals_seen += 1
        stopping.set()
        if consumer is not None:
            consumer.stop()
        if signals_seen > 1 or signum == signal.SIGINT:
            force.set()
        log.info("signal: stopping", extra={"signal": signal.Signals(signum).name})

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig)
    exit_code = EXIT_OK
    try:
        await dataplane.load_preloaded()
        policy = settings.policy
        if settings.size_from_models:
            sizes = []
            for name in dataplane.served_model_names():
                view = dataplane.model_config(name)
                sizes.append(max(1, view.max_batch_size) * max(1, view.instance_count))
            policy = sized_policy(policy, sizes)
        consumer = Consumer(dataplane, streams, policy, metrics)
        log.info(
            "consuming",
            extra={
                "stream": settings.names.requests, "group": settings.names.group,
                "consumer": settings.names.consumer, "metrics_port": listener.port,
                "read_count": policy.read_count, "max_inflight": policy.max_inflight,
            },
        )  # fmt: skip
        if stopping.is_set():
            consumer.stop()
        run = asyncio.ensure_future(consumer.run())
        stop_seen = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({run, stop_seen}, return_when="FIRST_COMPLETED")
        stop_seen.cancel()
        if not run.done():
            # Stopping: the claimed entries get the grace, unless a second signal comes.
            forced = asyncio.ensure_future(force.wait())
            await asyncio.wait(
                {run, forced}, timeout=settings.drain_timeout_s, return_when="FIRST_COMPLETED"
            )
            forced.cancel()
        if not run.done():
            exit_code = EXIT_CUT
            log.error(
                "cut entries still running; they stay pending for another consumer",
                extra={"cut_entries": consumer.inflight},
            )
            run.cancel()
        else:
            run.result()
        log.info("consumer stopped", extra={"exit_code": exit_code})
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
        dataplane.stop()
        await dataplane.close()
        await listener.close()
        await client.aclose()
    return exit_code
