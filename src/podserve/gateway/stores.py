"""The configured store: SQLite in process, or Redis + PostgreSQL for several replicas."""

from __future__ import annotations

from collections.abc import Mapping

from podserve.config.gateway_config import GatewayConfig, RedisPostgresStore
from podserve.gateway.errors import InvalidRequest
from podserve.gateway.store.base import Store


def open_store(config: GatewayConfig, env: Mapping[str, str], serving: bool = False) -> Store:
    """The configured store (the CLI passes its environment for the *Env settings).
    `serving`: for the gateway's event loop, where SQLite may wait for another writer's
    lock no longer than `storeTimeoutMs` (the CLI waits its 5 s)."""
    store = config.store
    timeout_s = config.store_timeout_ms / 1000
    if isinstance(store, RedisPostgresStore):
        from podserve.gateway.store.redis_postgres import RedisPostgresStore as Shared

        redis_url = store.redis if store.redis is not None else env.get(store.redis_env or "")
        dsn = store.postgres if store.postgres is not None else env.get(store.postgres_env or "")
        if not redis_url or not dsn:
            raise InvalidRequest("store: the Redis URL or PostgreSQL DSN env var is not set")
        # socket timeouts of at least 0.5 s: see RedisPostgresStore
        return Shared(redis_url, dsn, max(0.5, timeout_s), cluster=store.redis_cluster)
    from podserve.gateway.store.sqlite import SqliteStore

    if serving:
        return SqliteStore(store.path, busy_timeout_s=timeout_s)
    return SqliteStore(store.path)
