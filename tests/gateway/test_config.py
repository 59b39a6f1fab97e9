"""The config contract: issue 14's example keys work as written; typos are refused."""

from __future__ import annotations

from decimal import Decimal

import pytest

from podserve.config.gateway_config import RedisPostgresStore, SqliteStore, load_gateway_config
from podserve.core.errors import InvalidInput
from tests.gateway.support import ROOT


def test_the_issue_example_loads_as_written() -> None:
    config = load_gateway_config((ROOT / "examples/gateway/gateway.yaml").read_text())
    assert config.store == SqliteStore(kind="sqlite", path="gateway.db")
    assert config.pools[0].endpoints == ["http://127.0.0.1:8000"]
    assert config.pools[0].weight == 100
    assert config.fallbacks[0].base_url == "http://127.0.0.1:9000/v1"
    assert config.fallbacks[0].api_key_env == "HOSTED_API_KEY"
    assert config.prices["tiny-lm"].per_million_usd() == (Decimal("1.0"), Decimal("2.0"))
    assert config.defaults.max_tokens == 256
    assert config.teams["demo"].budget_usd == Decimal("5.0")
    assert config.teams["demo"].budget_period == "monthly"
    shared = load_gateway_config(
        "store: {kind: redis-postgres, redis: 'redis://r:6379/0', postgres: 'postgresql://p'}"
    )
    assert isinstance(shared.store, RedisPostgresStore)


def test_a_gpu_hour_price_is_cost_over_throughput() -> None:
    config = load_gateway_config(
        "pools: [{name: a, models: [m], endpoints: ['http://x']}]\n"
        "prices: {m: {gpuHourUsd: 3.6, tokensPerSecond: 1000}}"
    )
    # 3.6 USD / 3.6M tokens = 1 USD per million, input and output alike.
    assert config.prices["m"].per_million_usd() == (Decimal(1), Decimal(1))


def test_prices_and_output_caps_past_the_exact_range_are_refused() -> None:
    """Bounds that keep every hold an exact integer in both stores (gateway_config.py)."""
    with pytest.raises(InvalidInput, match="USD per million"):
        load_gateway_config("prices: {m: {inputPerMillionUsd: 1, outputPerMillionUsd: 1e6}}")
    with pytest.raises(InvalidInput, match="USD per million"):
        load_gateway_config("prices: {m: {gpuHourUsd: 1e9, tokensPerSecond: 1}}")
    with pytest.raises(InvalidInput, match="maxTokens"):
        load_gateway_config("defaults: {maxTokens: 2000000}")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("pools: [{name: a, models: [m], endpoints: ['http://x'], wieght: 3}]", "wieght"),
        ("pools: [{name: a, models: [m], endpoints: [pod-0:8000]}]", "not an http"),
        ("pools: [{name: a, models: [m], endpoints: ['http://pod:80000']}]", "80000"),
        ("fallbacks: [{name: h, baseUrl: 'api.openai.com/v1', models: [m]}]", "not an http"),
        ("store: {kind: redis-postgres, redis: r}", "postgres"),
        ("prices: {m: {inputPerMillionUsd: 1}}", "outputPerMillionUsd"),
        ("defaults: {onBudgetShort: maybe}", "onBudgetShort"),
        ("- a list", "mapping"),
        (
            "fallbacks: [{name: h, baseUrl: 'http://h/v1', models: [m], upstreamModels: {x: y}}]",
            "h: prices/upstreamModels/tokenizers name models it does not serve: x",
        ),
        (
            "fallbacks: [{name: h, baseUrl: 'http://h/v1', models: [m], upstreamModels: {m: ''}}]",
            "h.upstreamModels: no name for m",
        ),
        (
            "pools: [{name: a, models: [m], endpoints: ['http://x'], prices: {m: "
            "{inputPerMillionUsd: 1, outputPerMillionUsd: 1, tokenizer: t.json}}}]",
            "a.prices: a tokenizer belongs in prices.<model>",
        ),
        (
            "pools: [{name: a, models: [m], endpoints: ['http://x']}, {name: a, models: [m], "
            "endpoints: ['http://y']}]",
            "unique",
        ),
    ],
)
def test_bad_configs_name_the_problem(text: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        load_gateway_config(text)


def _keys(model: type, prefix: str = "") -> set[str]:
    """Every camelCase key of a config section, nested sections dotted."""
    from pydantic import BaseModel

    found = set()
    for name, field in model.model_fields.items():  # type: ignore[attr-defined]
        alias = field.alias or name
        annotation = field.annotation
        inner = [
            a
            for a in getattr(annotation, "__args__", (annotation,))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        if not inner:
            found.add(prefix + alias)  # a leaf
        for arg in inner:
            found |= _keys(arg, f"{prefix}{alias}.")
    return found


def test_docs_document_every_config_key() -> None:
    """docs/gateway.md's table names each key (the part after the section is enough for
    keys under a named entry, e.g. `pools[].weight` or `prices.<model>.tokenizer`)."""
    from podserve.config.gateway_config import GatewayConfig

    docs = (ROOT / "docs" / "gateway.md").read_text()
    missing = sorted(k for k in _keys(GatewayConfig) if f"{k.rsplit('.', 1)[-1]}`" not in docs)
    assert missing == []


def test_the_public_surface() -> None:
    import podserve.gateway

    assert len(set(podserve.gateway.__all__)) == len(podserve.gateway.__all__)
    for name in podserve.gateway.__all__:
        assert getattr(podserve.gateway, name) is not None


def test_requests_reserve_at_the_dearest_upstream_and_bill_at_the_one_that_served() -> None:
    from podserve.gateway.money import Rate
    from podserve.gateway.prices import price_table

    config = load_gateway_config(
        "pools:\n"
        "  - {name: a, models: [m, n], endpoints: ['http://a']}\n"
        "  - {name: b, models: [m], endpoints: ['http://b'],\n"
        "     prices: {m: {inputPerMillionUsd: 0.5, outputPerMillionUsd: 4}}}\n"
        "fallbacks:\n"
        "  - {name: h, baseUrl: 'http://h/v1', models: [m, n],\n"
        "     prices: {m: {inputPerMillionUsd: 3, outputPerMillionUsd: 1},\n"
        "              n: {inputPerMillionUsd: 0.1, outputPerMillionUsd: 0.1}}}\n"
        "prices:\n"
        "  m: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}\n"
        "  n: {inputPerMillionUsd: 1, outputPerMillionUsd: 2}\n"
    )
    table = price_table(config)
    # input and output apart: 3 from h, 4 from b
    assert table.hold_rate("m") == Rate(3000, 4000)
    assert table.billed_rate("m", "a") == Rate(1000, 2000)  # prices.m
    assert table.billed_rate("m", "b") == Rate(500, 4000)
    assert table.billed_rate("m", "h") == Rate(3000, 1000)
    assert table.hold_rate("n") == Rate(1000, 2000)
    assert table.billed_rate("n", "h") == Rate(100, 100)
    assert table.billed_rate("m", "") == table.hold_rate("m")  # no upstream served
    assert table.hold_rate("unpriced") == Rate(0, 0)
    # every bill a hold can become fits in it
    for (model, _), rate in table.served.items():
        hold = table.hold_rate(model)
        assert rate.input_nano <= hold.input_nano
        assert rate.output_nano <= hold.output_nano


@pytest.mark.parametrize(
    "section",
    [
        "teams: {'search@2026-12': {budgetUsd: 1}}",
        "namespaces: {'a:b{c}': {rpm: 5}}",
        "teams: {t: {budgetUsd: 1e30}}",
    ],
)
def test_scope_names_and_budgets_that_would_break_the_store_are_refused(section: str) -> None:
    """A team name with `@` shared another team's periodic budget scope; a budget past
    2**53 micro-dollars is not exact in Redis's doubles (and past 2**63 overflowed SQLite)."""
    with pytest.raises(InvalidInput, match=r"teams|namespaces"):
        load_gateway_config(section + "\n")


_POOL = "pools: [{name: a, models: [tiny-lm], endpoints: ['http://x']}]\n"


def test_a_price_for_a_model_nothing_serves_is_refused() -> None:
    """`prices: {tiny_lm: ...}` beside a pool serving `tiny-lm` loaded, and tiny-lm was
    then free: no request for it was ever held or billed, so no budget bit."""
    with pytest.raises(InvalidInput, match="prices: no pool or fallback serves tiny_lm"):
        load_gateway_config(_POOL + "prices: {tiny_lm: {gpuHourUsd: 1, tokensPerSecond: 1}}")
    fallback = "fallbacks: [{name: h, baseUrl: 'http://h/v1', models: [hosted-lm]}]\n"
    served = load_gateway_config(
        _POOL + fallback + "prices:\n"
        "  tiny-lm: {gpuHourUsd: 1, tokensPerSecond: 1}\n"
        "  hosted-lm: {inputPerMillionUsd: 1, outputPerMillionUsd: 1}\n"
    )
    assert sorted(served.prices) == ["hosted-lm", "tiny-lm"]
    # with no upstream nothing is routed, so nothing goes unbilled (the accounting tests)
    assert load_gateway_config("prices: {m: {gpuHourUsd: 1, tokensPerSecond: 1}}").prices


@pytest.mark.parametrize(
    "text",
    [
        "pools: [{name: a, models: [tiny-lm, tiny-lm], endpoints: ['http://x']}]",
        "fallbacks: [{name: h, baseUrl: 'http://h/v1', models: [m, tiny-lm, tiny-lm]}]",
    ],
)
def test_a_model_listed_twice_by_one_upstream_is_refused(text: str) -> None:
    """The router adds a pool once per listing: `[tiny-lm, tiny-lm]` doubled that pool's
    share of a weighted canary split."""
    with pytest.raises(InvalidInput, match=r"models: .*more than once: tiny-lm"):
        load_gateway_config(text)


def test_a_model_only_weight_0_pools_serve_needs_a_fallback() -> None:
    """Weight 0 is "only as overflow": with every pool of a model at 0 and no fallback,
    the gateway started and answered its every request with 503."""
    zero = "  - {name: %s, models: [tiny-lm, %s], endpoints: ['http://%s'], weight: 0}\n"
    idle = "pools:\n" + zero % ("a", "iris", "a") + zero % ("b", "minilm", "b")
    with pytest.raises(InvalidInput, match="every pool serving iris, minilm, tiny-lm has weight 0"):
        load_gateway_config(idle)
    # Overflow for a weighted pool, or a standby before a fallback: both load.
    weighted = "  - {name: c, models: [iris, minilm, tiny-lm], endpoints: ['http://c']}\n"
    assert load_gateway_config(idle + weighted).pools[0].weight == 0
    hosted = "fallbacks: [{name: h, baseUrl: 'http://h/v1', models: [iris, minilm, tiny-lm]}]"
    assert load_gateway_config(idle + hosted).fallbacks[0].name == "h"


@pytest.mark.parametrize(
    "endpoint", ["http://127.0.0.1:18001/v1", "http://pod:8000?x=1", "http://pod:8000/#top"]
)
def test_a_pod_endpoint_with_a_path_is_refused(endpoint: str) -> None:
    """The request's own path is appended to the endpoint: `http://pod:8000/v1` made every
    request `/v1/v1/...` and every answer a 503."""
    with pytest.raises(InvalidInput, match=r"pools\.0\.endpoints\.0: .*scheme://host:port only"):
        load_gateway_config(f"pools: [{{name: a, models: [m], endpoints: ['{endpoint}']}}]")


def test_a_pod_endpoint_may_end_in_a_slash() -> None:
    config = load_gateway_config("pools: [{name: a, models: [m], endpoints: ['http://pod:80/']}]")
    assert config.pools[0].endpoints == ["http://pod:80/"]
    # fallbacks' paths are the provider's: left alone
    hosted = "fallbacks: [{name: h, baseUrl: 'https://h/openai/v1?api-version=1', models: [m]}]"
    assert load_gateway_config(hosted).fallbacks[0].base_url.endswith("?api-version=1")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        # the documented keys are camelCase: one file must not hold two spellings of a key
        ("max_body_bytes: 20000", "max_body_bytes: .*(keys are camelCase: maxBodyBytes)"),
        ("routing: {scrape_interval_ms: 50}", "routing.scrape_interval_ms: "),
        ("fallbacks: [{name: h, base_url: 'http://h/v1', models: [m]}]", "base_url"),
        # YAML's `true` is not 1, nor a string a number
        ("storeTimeoutMs: true", "storeTimeoutMs: Input should be a valid integer"),
        ("keyCacheS: true", "keyCacheS: Input should be a valid number"),
        ("routing: {retryBudgetRatio: '0.5'}", "routing.retryBudgetRatio"),
        ("failOpen: {enabled: 1}", "failOpen.enabled: Input should be a valid boolean"),
        ("defaults: {maxTokens: 12.0}", "defaults.maxTokens"),
        ("teams: {t: {rpm: 100000000000000000000}}", "teams.t.rpm"),
    ],
)
def test_keys_and_values_are_taken_only_as_documented(text: str, needle: str) -> None:
    with pytest.raises(InvalidInput, match=needle):
        load_gateway_config(text)


def test_ints_still_do_for_seconds_and_strings_for_prices() -> None:
    """Strictness stops at what was lost: `keyCacheS: 2` is 2.0, and a price may be a
    string, as `podserve render` writes Decimals into the gateway's ConfigMap."""
    config = load_gateway_config(
        "keyCacheS: 2\nrouting: {breakerOpenS: 5}\n" + _POOL + "prices: {tiny-lm: "
        "{inputPerMillionUsd: '0.5', outputPerMillionUsd: 1}}"
    )
    assert (config.key_cache_s, config.routing.breaker_open_s) == (2.0, 5.0)
    assert config.prices["tiny-lm"].per_million_usd() == (Decimal("0.5"), Decimal(1))


def test_the_documented_and_rendered_configs_load() -> None:
    """docs/gateway.md's configuration example, and what `podserve render` writes into the
    ConfigMap for examples/gateway/gateway-k8s.yaml, load as the gateway loads them."""
    import re

    from podserve.config.gateway_spec import load_gateway_spec
    from podserve.kube.render.gateway import gateway_config_text

    docs = (ROOT / "docs" / "gateway.md").read_text()
    section = docs.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    [example] = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert load_gateway_config(example).pools[0].name == "chat"
    spec = load_gateway_spec((ROOT / "examples/gateway/gateway-k8s.yaml").read_text())
    assert load_gateway_config(gateway_config_text(spec)) == spec.spec.config
