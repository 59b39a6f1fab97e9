"""The `podserve gateway --config gateway.yaml` contract: store, pools, fallbacks, prices,
defaults, budgets and limits. camelCase keys, unknown keys refused (a typo must not vanish).

docs/gateway.md documents every key; the keys in issue 14's example are part of the
contract and are tested as written (tests/gateway/test_config.py).
"""

from __future__ import annotations

from decimal import Decimal
from enum import StrEnum
from typing import Annotated, Literal

import yaml
from pydantic import (
    Field,
    ValidationError,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_core import ErrorDetails

from podserve.config.gateway_fields import (
    MAX_BUDGET_USD,
    MAX_OUTPUT_TOKENS,
    MAX_PRICE_PER_MILLION_USD,
    MAX_RATE_PER_MINUTE,
    NAME,
    Bool,
    Float,
    HttpUrl,
    Int,
    Models,
    PodUrl,
    Section,
    scope_name_error,
)
from podserve.core.errors import InvalidInput


class SqliteStore(Section):
    kind: Literal["sqlite"]
    path: str = Field("gateway.db", description="SQLite file (one gateway replica only).")


class RedisPostgresStore(Section):
    kind: Literal["redis-postgres"]
    redis: str | None = Field(None, description="Redis URL for reservations and counters.")
    postgres: str | None = Field(None, description="PostgreSQL DSN for keys and the ledger.")
    redis_env: str | None = Field(None, description="Env var holding the Redis URL instead.")
    postgres_env: str | None = Field(None, description="Env var holding the DSN instead.")
    redis_cluster: Bool = Field(
        False,
        description="The Redis URL is a Redis Cluster (e.g. a managed cluster-mode Redis): "
        "every gateway key then carries the `{gw}` hash tag, so each script's keys share one "
        "slot.",
    )

    @model_validator(mode="after")
    def _one_source_each(self) -> RedisPostgresStore:
        if (self.redis is None) == (self.redis_env is None):
            raise ValueError("store: give exactly one of redis or redisEnv")
        if (self.postgres is None) == (self.postgres_env is None):
            raise ValueError("store: give exactly one of postgres or postgresEnv")
        return self


StoreConfig = Annotated[SqliteStore | RedisPostgresStore, Field(discriminator="kind")]


class Price(Section):
    input_per_million_usd: Decimal | None = Field(None, ge=0, description="USD per 1M input.")
    output_per_million_usd: Decimal | None = Field(None, ge=0, description="USD per 1M output.")
    gpu_hour_usd: Decimal | None = Field(
        None, gt=0, description="Self-hosted: the pool's GPU-hour cost..."
    )
    tokens_per_second: Decimal | None = Field(
        None, gt=0, description="...and its measured throughput: price = cost / tokens."
    )
    tokenizer: str | None = Field(
        None, description="tokenizer.json of the model: exact prompt counts (else a bound)."
    )
    media_part_tokens: Int | None = Field(
        None,
        ge=1,
        le=MAX_OUTPUT_TOKENS,
        description="The most prompt tokens one non-text content part (an image, audio) "
        "of a chat message costs at this model (LLaVA 1.5: 576 an image); without it, "
        "such parts are refused: nothing else bounds them.",
    )

    @model_validator(mode="after")
    def _priced(self) -> Price:
        derived = self.gpu_hour_usd is not None and self.tokens_per_second is not None
        if (self.gpu_hour_usd is None) != (self.tokens_per_second is None):
            raise ValueError("prices: gpuHourUsd and tokensPerSecond go together")
        if not derived and (
            self.input_per_million_usd is None or self.output_per_million_usd is None
        ):
            raise ValueError(
                "prices: give inputPerMillionUsd and outputPerMillionUsd, "
                "or gpuHourUsd and tokensPerSecond"
            )
        if max(self.per_million_usd()) > MAX_PRICE_PER_MILLION_USD:
            raise ValueError(
                f"prices: over {MAX_PRICE_PER_MILLION_USD} USD per million tokens (derived "
                "from gpuHourUsd / tokensPerSecond too) is surely a typo"
            )
        return self

    def per_million_usd(self) -> tuple[Decimal, Decimal]:
        """(input, output) USD per million tokens; a GPU-hour price applies to both."""
        derived: Decimal | None = None
        if self.gpu_hour_usd is not None and self.tokens_per_second is not None:
            derived = self.gpu_hour_usd * Decimal(1_000_000) / (self.tokens_per_second * 3600)
        inp = self.input_per_million_usd if self.input_per_million_usd is not None else derived
        out = self.output_per_million_usd if self.output_per_million_usd is not None else derived
        # The validator guarantees one source for each.
        assert inp is not None
        assert out is not None
        return inp, out


_UPSTREAM_PRICES = (
    "What this upstream costs per model, where it differs from `prices.<model>` (a hosted "
    "API's list price, a canary pool on other GPUs): its requests are billed at it, and "
    "every request for the model reserves at the dearest of the model's upstreams."
)


class Pool(Section):
    name: str = Field(pattern=NAME, description="Pool name (the `upstream` metric label).")
    models: Models = Field(min_length=1, description="Models this pool serves (each once).")
    endpoints: list[PodUrl] = Field(
        min_length=1, description="Base URLs of the pods: scheme://host:port, no path."
    )
    weight: Int = Field(100, ge=0, description="Share among pools serving the same model.")
    max_waiting: Float = Field(
        16.0, gt=0, description="A pod with more waiting requests than this is saturated."
    )
    prices: dict[str, Price] = Field(default_factory=dict, description=_UPSTREAM_PRICES)


class Fallback(Section):
    name: str = Field(pattern=NAME, description="Upstream name (the metric label).")
    base_url: HttpUrl = Field(description="OpenAI-compatible base URL, ending in /v1.")
    api_key_env: str | None = Field(None, description="Env var holding the API key.")
    models: Models = Field(min_length=1, description="Models it may serve (each once).")
    upstream_models: dict[str, str] = Field(
        default_factory=dict,
        description="The name this API knows a model by, where it is not the gateway's "
        "(`{llama-3-8b: gpt-4o-mini}`): the `model` of the OpenAI routes' bodies sent to it.",
    )
    prices: dict[str, Price] = Field(default_factory=dict, description=_UPSTREAM_PRICES)
    tokenizers: dict[str, str] = Field(
        default_factory=dict,
        description="tokenizer.json of the model this API serves under another name "
        "(`upstreamModels`), per gateway model: a prompt is held at the larger of its "
        "counts. A renamed model without one is held at the prompt's byte bound.",
    )


class OnBudgetShort(StrEnum):
    REJECT = "reject"
    CLAMP = "clamp"


class Defaults(Section):
    max_tokens: Int = Field(
        256,
        ge=1,
        le=MAX_OUTPUT_TOKENS,
        description="Output cap when a request sends none.",
    )
    on_budget_short: OnBudgetShort = Field(
        OnBudgetShort.REJECT,
        description="`reject` (429) or `clamp` max_tokens to what the budget still covers.",
    )
    budget_wait_s: Float = Field(
        10.0,
        ge=0,
        description="A request that does not fit only because of other outstanding "
        "reservations waits up to this long for them to settle before its 429 (0: no wait).",
    )
    lease_s: Float = Field(
        600.0, gt=0, description="A reservation not settled by then is charged in full."
    )


class BudgetPeriod(StrEnum):
    """When a budget starts again (gateway/periods.py): never, or every UTC day, ISO week
    (Monday 00:00 UTC) or calendar month."""

    LIFETIME = "lifetime"
    DAILY = "daily"
    WEEKLY = "weekly"
    MONTHLY = "monthly"


class ScopeLimits(Section):
    budget_usd: Decimal | None = Field(
        None, ge=0, le=MAX_BUDGET_USD, description="Hard budget, USD."
    )
    budget_period: BudgetPeriod = Field(
        BudgetPeriod.LIFETIME,
        description="`lifetime` (default), or the budget starts again every UTC `daily`, "
        "ISO `weekly` (Monday) or calendar `monthly` period.",
    )
    rpm: Int | None = Field(None, ge=1, le=MAX_RATE_PER_MINUTE, description="Requests per minute.")
    tpm: Int | None = Field(
        None, ge=1, le=MAX_RATE_PER_MINUTE, description="Tokens (prompt + output) per minute."
    )


class RoutingPolicy(StrEnum):
    LEAST_LOADED = "least-loaded"
    ROUND_ROBIN = "round-robin"  # ignores load: the baseline the benchmark compares with


class Routing(Section):
    policy: RoutingPolicy = Field(
        RoutingPolicy.LEAST_LOADED, description="`least-loaded` (default) or `round-robin`."
    )
    scrape_interval_ms: Int = Field(100, ge=10, description="Pod /metrics and /ready poll.")
    retry_budget_ratio: Float = Field(
        0.2, ge=0, le=1, description="Retries allowed per request (Finagle's RetryBudget)."
    )
    breaker_failures: Int = Field(5, ge=1, description="Consecutive failures that open.")
    breaker_open_s: Float = Field(10.0, gt=0, description="Open this long, then one probe.")
    connect_timeout_s: Float = Field(2.0, gt=0, description="Upstream connect timeout.")
    read_timeout_s: Float = Field(300.0, gt=0, description="Upstream read timeout.")


class FailOpen(Section):
    enabled: Bool = Field(False, description="Serve while the store is down (opt-in).")
    replicas: Int = Field(
        1, ge=1, description="Gateway replicas: each may spend at most budget ÷ replicas."
    )


class StoreBreaker(Section):
    """When a networked store is taken for down (gateway/store_calls.py)."""

    failures: Int = Field(
        3, ge=1, le=1000, description="Store calls failing in a row that take it for down."
    )
    open_s: Float = Field(
        1.0,
        gt=0,
        le=60,
        description="Seconds admission calls are refused without a call, before one probe.",
    )
    min_span_s: Float = Field(
        0.25,
        ge=0,
        le=60,
        description=(
            "The failures in a row must also span this many seconds: a brownout's few slow"
            " calls between good ones do not take the store for down."
        ),
    )


class GatewayConfig(Section):
    store: StoreConfig = Field(
        default_factory=lambda: SqliteStore(kind="sqlite"),
        description="`{kind: sqlite, path}` or `{kind: redis-postgres, redis, postgres}`.",
    )
    pools: list[Pool] = Field(default_factory=list, description="Self-hosted pools.")
    fallbacks: list[Fallback] = Field(default_factory=list, description="Hosted APIs.")
    prices: dict[str, Price] = Field(default_factory=dict, description="Per model.")
    defaults: Defaults = Field(default_factory=lambda: Defaults())
    teams: dict[str, ScopeLimits] = Field(default_factory=dict, description="Per team.")
    namespaces: dict[str, ScopeLimits] = Field(
        default_factory=dict, description="Per namespace: budget, rpm, tpm."
    )
    routing: Routing = Field(default_factory=lambda: Routing())
    fail_open: FailOpen = Field(default_factory=lambda: FailOpen())
    store_breaker: StoreBreaker = Field(default_factory=lambda: StoreBreaker())
    store_timeout_ms: Int = Field(
        40,
        ge=1,
        description="A store call slower than this fails closed (503): with the default, a "
        "hung store is answered within 50 ms; a refused connection fails at once.",
    )
    max_body_bytes: Int = Field(
        16 * 1024 * 1024, ge=1024, description="Larger request bodies are refused (413)."
    )
    max_response_bytes: Int = Field(
        256 * 1024 * 1024,
        ge=1024,
        description="A non-streamed upstream response larger than this is not held: 502, "
        "charged its reservation (the upstream did the work; its usage was not read).",
    )
    max_in_flight: Int = Field(
        2048,
        ge=1,
        description="Proxied requests held at once (streams included); more are refused "
        "with 503 + Retry-After before their body is read.",
    )
    max_body_bytes_in_flight: Int = Field(
        256 * 1024 * 1024,
        ge=1024,
        description="Request-body bytes held at once by the proxied requests; a request "
        "that would pass it is refused with 503 + Retry-After. At least maxBodyBytes.",
    )
    key_cache_s: Float = Field(
        1.0, ge=0, description="Keys are cached this long: revocation takes effect within."
    )
    # Connection bounds, as the pod's (httpedge/limits.py; the same defaults: nginx's
    # large_client_header_buffers and client_header_timeout): plain uvicorn keeps a
    # connection that never completes its headers open for ever, and reads headers of any
    # size.
    max_connections: Int = Field(
        4096,
        ge=1,
        description="Open client connections at most; one more is answered 503 (JSON, "
        "Retry-After) and closed before anything is read from it.",
    )
    max_header_bytes: Int = Field(
        32 * 1024,
        ge=1024,
        description="Largest request line plus headers; more is answered 431 and closed.",
    )
    body_timeout_s: Float = Field(
        30.0,
        gt=0,
        description="Time a request's whole body has to arrive after its headers; then 408 "
        "and the connection closed (16 MiB in 30 s is 0.55 MB/s).",
    )
    header_timeout_s: Float = Field(
        10.0,
        gt=0,
        description="Time a client has to send a request's complete headers; then 408 "
        "and the connection closed.",
    )

    @model_validator(mode="after")
    def _body_bounds(self) -> GatewayConfig:
        if self.max_body_bytes_in_flight < self.max_body_bytes:
            raise ValueError(
                "maxBodyBytesInFlight must be at least maxBodyBytes: one request of the "
                "largest allowed body must fit"
            )
        return self

    @model_validator(mode="after")
    def _scope_names(self) -> GatewayConfig:
        for kind, names in (("team", self.teams), ("namespace", self.namespaces)):
            for name in names:
                error = scope_name_error(kind, name)
                if error is not None:
                    raise ValueError(f"{kind}s: {error}")
        return self

    @model_validator(mode="after")
    def _names_unique(self) -> GatewayConfig:
        names = [p.name for p in self.pools] + [f.name for f in self.fallbacks]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"pool/fallback names must be unique: {', '.join(dupes)}")
        return self

    @model_validator(mode="after")
    def _upstream_overrides(self) -> GatewayConfig:
        upstreams: list[Pool | Fallback] = [*self.pools, *self.fallbacks]
        for up in upstreams:
            named = set(up.prices)
            if isinstance(up, Fallback):
                named |= set(up.upstream_models) | set(up.tokenizers)
                empty = sorted(m for m, name in up.upstream_models.items() if not name.strip())
                if empty:
                    raise ValueError(f"{up.name}.upstreamModels: no name for {', '.join(empty)}")
            stray = sorted(named - set(up.models))
            if stray:
                raise ValueError(
                    f"{up.name}: prices/upstreamModels/tokenizers name models it does not serve: "
                    f"{', '.join(stray)}"
                )
            tokenized = sorted(m for m, price in up.prices.items() if price.tokenizer)
            if tokenized:
                raise ValueError(
                    f"{up.name}.prices: a tokenizer belongs in prices.<model> (prompts are "
                    f"counted before an upstream is chosen): {', '.join(tokenized)}"
                )
        return self

    @model_validator(mode="after")
    def _prices_served(self) -> GatewayConfig:
        # A price for a model nothing serves is a typo (`tiny_lm` for `tiny-lm`), and the
        # served model was then free: no budget ever bit. A config with no upstream at all
        # routes nothing, so nothing can go unbilled: the accounting tests price models
        # that way (prices.price_table holds such a model at its own price).
        stray = sorted(set(self.prices) - set(self.models()))
        if stray and (self.pools or self.fallbacks):
            raise ValueError(
                f"prices: no pool or fallback serves {', '.join(stray)} (a misspelt model "
                "would leave the served one free)"
            )
        return self

    @model_validator(mode="after")
    def _routable(self) -> GatewayConfig:
        # Weight 0 is "only as overflow" (routing.Router._pick_pool): with nothing else to
        # overflow from, every request for the model was a 503.
        hosted = {m for f in self.fallbacks for m in f.models}
        idle = sorted(
            m
            for m in {m for p in self.pools for m in p.models} - hosted
            if all(p.weight == 0 for p in self.pools if m in p.models)
        )
        if idle:
            raise ValueError(
                f"pools: every pool serving {', '.join(idle)} has weight 0 (only as overflow) "
                "and no fallback serves it: it would never be routed"
            )
        return self

    def models(self) -> list[str]:
        found = {m for p in self.pools for m in p.models} | {
            m for f in self.fallbacks for m in f.models
        }
        return sorted(found)


def load_gateway_config(text: str, source: str = "<config>") -> GatewayConfig:
    """Parse YAML text; any problem is an InvalidInput naming the file and the field."""
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{source}: not YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise InvalidInput(f"{source}: the gateway config must be a mapping")
    try:
        return GatewayConfig.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}{_hint(err)}"
            for err in exc.errors()
        )
        raise InvalidInput(f"{source}: {problems}") from exc


def _hint(err: ErrorDetails) -> str:
    """The documented spelling of a snake_case key, which is refused as unknown."""
    key = err["loc"][-1] if err["loc"] else ""
    if err["type"] != "extra_forbidden" or not isinstance(key, str) or "_" not in key:
        return ""
    return f" (keys are camelCase: {to_camel(key)})"
