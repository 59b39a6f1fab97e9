"""A real redis-server on 127.0.0.1 (tests/support/redis.py: a free port, no persistence)
for the consume tests, and an in-process consumer over a real data plane."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from podserve.config.settings import ServerSettings
from podserve.consume.consumer import Consumer, ConsumerPolicy
from podserve.consume.metrics import ConsumerMetrics
from podserve.consume.retention import Retention
from podserve.consume.streams import RedisStreams, StreamNames
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from tests.consume.replies import streams
from tests.support.redis import redis_server


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with redis_server() as server:
        yield server.url


_counter = iter(range(1_000_000))


def fresh_names(consumer: str = "c1", retention: Retention | None = None) -> StreamNames:
    """Stream names no other test uses (the server is shared by the session)."""
    n = next(_counter)
    return StreamNames(
        requests=f"req{n}",
        group="g",
        results=f"res{n}",
        dead_letters=f"req{n}:dead",
        consumer=consumer,
        retention=retention or Retention(),
    )


@dataclass
class Harness:
    client: aioredis.Redis
    names: StreamNames
    consumer: Consumer
    dataplane: DataPlane
    metrics: ConsumerMetrics

    async def results(self, n: int, timeout_s: float = 30.0) -> list[dict[bytes, bytes]]:
        """Read the results stream until it holds `n` entries (XREAD BLOCK: a real wait)."""
        return await read_stream(self.client, self.names.results, n, timeout_s)


async def read_stream(
    client: aioredis.Redis, stream: str, n: int, timeout_s: float = 30.0
) -> list[dict[bytes, bytes]]:
    found: list[dict[bytes, bytes]] = []
    last = "0-0"
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while len(found) < n:
        if loop.time() > deadline:
            raise AssertionError(f"{stream}: {len(found)} of {n} entries after {timeout_s}s")
        reply = await client.xread({stream: last}, block=200)
        for _name, items in streams(reply):
            for entry_id, fields in items:
                last = entry_id.decode()
                found.append(fields)
    return found


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """A Redis connection for a test to read and write the streams with."""
    connection = aioredis.Redis.from_url(redis_url)
    try:
        yield connection
    finally:
        await connection.aclose()


@contextlib.asynccontextmanager
async def consuming(
    redis_url: str,
    repository: Path,
    cache_dir: Path,
    policy: ConsumerPolicy,
    names: StreamNames | None = None,
) -> AsyncIterator[Harness]:
    settings = ServerSettings.build(
        {"model_repository": repository, "cache_dir": cache_dir, "models": []}, None
    )
    dataplane = build_dataplane(settings, asyncio.get_running_loop())
    await dataplane.load_preloaded()
    client = aioredis.Redis.from_url(redis_url)
    names = names or fresh_names()
    metrics = ConsumerMetrics(names.requests, names.group)
    consumer = Consumer(dataplane, RedisStreams(client, names), policy, metrics)
    await RedisStreams(client, names).ensure_group()
    task = asyncio.ensure_future(consumer.run())
    try:
        yield Harness(client, names, consumer, dataplane, metrics)
    finally:
        consumer.stop()
        await task
        dataplane.stop()
        await dataplane.close()
        await client.aclose()
