"""Shared real parts: two podserve pods (the second also stands in for the hosted
provider), started once per session, and a gateway on SQLite per module."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import uvloop

from tests.gateway.support import ROOT, TINY_LM, start_pod, wait_ready
from tests.support.server import ServerProcess


@dataclass
class Pods:
    a: ServerProcess  # tiny-lm, iris
    b: ServerProcess  # tiny-lm, minilm: a second pool pod, or "the hosted provider"


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    """Runs a test's coroutine on asyncio's own loop, then on uvloop (the gateway's)."""
    return uvloop.run if request.param == "uvloop" else asyncio.run


@pytest.fixture(scope="session")
def pods() -> Iterator[Pods]:
    pytest.importorskip("transformers")  # the pods serve the bundled tiny LM
    a = start_pod(f"tiny-lm={TINY_LM}", f"iris={ROOT / 'examples/models/iris'}")
    try:
        b = start_pod(f"tiny-lm={TINY_LM}", f"minilm={ROOT / 'examples/models/minilm'}")
    except BaseException:
        a.stop()
        raise
    try:
        wait_ready(a)
        wait_ready(b)
        yield Pods(a, b)
    finally:
        a.stop()
        b.stop()


def base_config(pods: Pods, **overrides: Any) -> dict[str, Any]:
    """The issue's example config, pointed at the test pods."""
    config: dict[str, Any] = {
        "store": {"kind": "sqlite", "path": "gateway.db"},
        "pools": [
            {
                "name": "chat",
                "models": ["tiny-lm", "iris"],
                "endpoints": [pods.a.url],
                "weight": 100,
            },
            {"name": "embed", "models": ["minilm"], "endpoints": [pods.b.url]},
        ],
        "fallbacks": [
            {
                "name": "hosted",
                "baseUrl": f"{pods.b.url}/v1",
                "apiKeyEnv": "HOSTED_API_KEY",
                "models": ["tiny-lm"],
            }
        ],
        "prices": {
            "tiny-lm": {
                "inputPerMillionUsd": 1.0,
                "outputPerMillionUsd": 2.0,
                "tokenizer": str(TINY_LM / "tokenizer.json"),
            }
        },
        "defaults": {"maxTokens": 256},
        "routing": {"scrapeIntervalMs": 50},
        # The test machine is shared and slow: the default 45 ms would fail healthy calls.
        "storeTimeoutMs": 3000,
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    from tests.gateway.support import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster_url() -> Iterator[str]:
    from tests.support.redis import redis_cluster_server

    with redis_cluster_server() as server:
        yield server.url


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    from tests.gateway.support import postgres_server

    with postgres_server() as dsn:
        yield dsn


def reset_shared_store(redis_url: str, postgres_dsn: str) -> None:
    """Empty Redis and drop the gateway tables: each test starts from nothing."""
    import psycopg
    import redis

    with redis.Redis.from_url(redis_url) as r:
        r.flushall()
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS gateway_keys, gateway_ledger")
