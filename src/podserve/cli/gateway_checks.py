"""What `podserve gateway` checks before it opens its store or serves: the settings that
come from the environment and the filesystem. Each problem is one line naming the setting
and exit code 2, where it was a traceback (a SQLite directory that does not exist, an unset
`redisEnv`, a Redis URL without a scheme, an API key no HTTP header can carry) or a gateway
that started and then failed every request (an unset `apiKeyEnv` sent no key; a missing
tokenizer made its model's requests 500s).

The config itself (config/gateway_config.py) stays free of both: `podserve render` parses
the same config, and its paths and variables are the pod's, not the machine's that renders.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from podserve.config.gateway_config import GatewayConfig, RedisPostgresStore

# redis-py's own rule (redis.connection.parse_url): anything else raised ValueError
# from inside the store's constructor.
_REDIS_SCHEMES = ("redis", "rediss", "unix")


def store_problems(config: GatewayConfig, env: Mapping[str, str]) -> list[str]:
    """Why the configured store cannot be opened, before trying: every command needs it."""
    store = config.store
    if not isinstance(store, RedisPostgresStore):
        directory = Path(store.path).parent
        if not directory.is_dir():
            return [f"store.path: {store.path}: the directory {directory} does not exist"]
        return []
    problems = []
    redis_url, postgres_dsn = store.redis, store.postgres
    for key, name in (("redisEnv", store.redis_env), ("postgresEnv", store.postgres_env)):
        if name is None:
            continue
        value = env.get(name, "")
        if not value:
            problems.append(f"store.{key}: the environment variable {name} is not set")
        elif key == "redisEnv":
            redis_url = value
        else:
            postgres_dsn = value
    # Neither value is echoed: a URL or DSN may carry a password.
    where = f" (from {store.redis_env})" if store.redis_env else ""
    if redis_url and urlsplit(redis_url).scheme not in _REDIS_SCHEMES:
        problems.append(
            f"store: the Redis URL{where} must start with redis://, rediss:// or unix://"
        )
    if postgres_dsn and not _dsn_parses(postgres_dsn):
        where = f" (from {store.postgres_env})" if store.postgres_env else ""
        problems.append(
            f"store: the PostgreSQL DSN{where} is neither key=value pairs nor a postgresql:// URL"
        )
    return problems


def _dsn_parses(dsn: str) -> bool:
    try:
        from psycopg import ProgrammingError
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:  # the store reports its missing extra itself
        return True
    try:
        conninfo_to_dict(dsn)
    except ProgrammingError:  # not quoted: libpq's message repeats part of the DSN
        return False
    return True


def api_key_problems(config: GatewayConfig, env: Mapping[str, str]) -> list[str]:
    """A fallback's `apiKeyEnv` that is unset (its requests went out with no key, and the
    provider's 401s were the first sign), or that an HTTP header cannot carry: a CR or
    LF (a Secret made from a file with its newline) made every request a 500; a
    character outside latin-1 crashed the start."""
    problems = []
    for fallback in config.fallbacks:
        name = fallback.api_key_env
        if name is None:
            continue
        key = env.get(name, "")
        where = f"fallbacks[{fallback.name}].apiKeyEnv: the environment variable {name}"
        if not key:
            problems.append(
                f"{where} is not set: requests to {fallback.name} would carry no API key"
            )
        elif any(ord(c) < 0x20 or ord(c) == 0x7F for c in key):
            problems.append(
                f"{where} holds a control character (a trailing newline?): an HTTP header "
                "cannot carry it"
            )
        elif not all(ord(c) < 0x100 for c in key):
            problems.append(
                f"{where} holds a character outside latin-1: an HTTP header cannot carry it"
            )
    return problems


def tokenizer_problems(config: GatewayConfig) -> list[str]:
    """Loads every configured tokenizer.json (into the cache the gateway counts with)."""
    from podserve.gateway.tokens import TokenizerUnusable, preload

    wanted = [
        (f"prices.{model}.tokenizer", price.tokenizer)
        for model, price in config.prices.items()
        if price.tokenizer
    ]
    wanted += [
        (f"fallbacks[{fallback.name}].tokenizers.{model}", path)
        for fallback in config.fallbacks
        for model, path in fallback.tokenizers.items()
    ]
    problems = []
    for setting, path in wanted:
        try:
            preload(path)
        except TokenizerUnusable as exc:
            problems.append(f"{setting}: cannot load {exc}")
    return problems


def serving_problems(config: GatewayConfig, env: Mapping[str, str]) -> list[str]:
    """Everything the serving gateway needs from its machine; `keys` and `spend` need the
    store only."""
    return [
        *store_problems(config, env),
        *api_key_problems(config, env),
        *tokenizer_problems(config),
    ]
