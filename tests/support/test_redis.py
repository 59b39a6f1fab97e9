"""The Redis starter the consume and gateway tests and benchmarks share, against the real
redis-server: what it starts, what callers may pass, and that it always stops the server."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import redis

from tests.support.redis import NOT_INSTALLED, redis_server


def test_a_server_without_persistence_answers_on_its_url() -> None:
    with redis_server() as server, redis.Redis.from_url(server.url) as client:
        assert client.ping()
        assert int(client.info("server")["process_id"]) == server.pid
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        workdir = Path(client.config_get("dir")["dir"])
        assert workdir.is_dir()
    assert server.proc.poll() is not None  # stopped on exit
    assert not workdir.exists()  # and its files removed


def test_extra_args_override_the_defaults() -> None:
    args = ("--appendonly", "yes", "--maxmemory", "10mb")
    with redis_server(args=args) as server, redis.Redis.from_url(server.url) as client:
        assert client.config_get("appendonly") == {"appendonly": "yes"}
        assert client.config_get("maxmemory") == {"maxmemory": str(10 * 2**20)}


def test_a_password_is_required_and_used_for_the_readiness_ping() -> None:
    with redis_server(password="s3cret pass") as server:
        with (
            redis.Redis.from_url(server.url) as anonymous,
            pytest.raises(redis.AuthenticationError),
        ):
            anonymous.ping()
        with redis.Redis.from_url(server.url, password="s3cret pass") as client:
            assert client.ping()


def test_a_server_is_started_again_on_the_port_of_a_stopped_one() -> None:
    """What the gateway's store-down test does: Redis goes away and comes back, empty."""
    with redis_server() as first, redis.Redis.from_url(first.url) as client:
        client.set("k", "v")
        client.shutdown(nosave=True)
    with redis_server(first.port) as second, redis.Redis.from_url(second.url) as client:
        assert second.url == first.url
        assert client.get("k") is None


def test_a_stopped_server_is_still_ended_on_exit() -> None:
    """A caller that SIGSTOPs the server (a hung store) and leaves it so."""
    with redis_server() as server:
        os.kill(server.pid, signal.SIGSTOP)
    assert server.proc.returncode is not None


def test_cpus_pin_the_server() -> None:
    cpu = min(os.sched_getaffinity(0))
    with redis_server(cpus={cpu}) as server:
        assert os.sched_getaffinity(server.pid) == {cpu}


def test_a_server_that_exits_at_start_says_why() -> None:
    with (
        pytest.raises(RuntimeError, match=r"(?s)exited with 1: .*no-such-directive.*Bad directive"),
        redis_server(args=("--no-such-directive", "1")),
    ):
        pass


def test_no_redis_server_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(pytest.skip.Exception, match=re.escape(NOT_INSTALLED)), redis_server():
        pass


def test_a_one_node_cluster_serves_every_slot_and_refuses_cross_slot_scripts() -> None:
    import asyncio

    from redis.asyncio.cluster import RedisCluster
    from redis.exceptions import RedisClusterException

    from tests.support.redis import redis_cluster_server

    async def check(url: str) -> None:
        client = RedisCluster.from_url(url)
        try:
            script = client.register_script("return redis.call('SET', KEYS[1], ARGV[1])")
            assert await script(keys=["{t}:a"], args=["1"]) == b"OK"
            both = client.register_script("redis.call('SET', KEYS[1], 1); return 1")
            with pytest.raises(RedisClusterException, match="same key slot"):
                await both(keys=["a", "b"], args=[])  # "a" and "b" hash to two slots
        finally:
            await client.aclose()

    with redis_cluster_server() as server:
        asyncio.run(check(server.url))
