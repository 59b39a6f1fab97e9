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
    config = load_gateway_config("prices: {m: {gpuHourUsd: 3.6, tokensPerSecond: 1000}}")
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
        "  unrouted: {inputPerMillionUsd: 7, outputPerMillionUsd: 7}\n"
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
    assert table.hold_rate("unrouted") == Rate(7000, 7000)
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
