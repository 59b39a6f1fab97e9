"""Hard budgets end to end (SQLite store, real pods, openai SDK): refusal with Retry-After,
clamping, concurrency, a cancelled stream's charge, and a crashed gateway's lease."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from tests.gateway.conftest import Pods, base_config
from tests.gateway.support import GatewayProcess, make_key, spend_by, wait_for_ledger_rows
from tests.support.server import wait_until

# tiny-lm prices: 1 micro-dollar per prompt token, 2 per output token.
PROMPT = "The function returns"  # 3 tokens with tiny-lm's tokenizer


@pytest.fixture(scope="module")
def gateway(pods: Pods, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    with GatewayProcess(base_config(pods), tmp_path_factory.mktemp("gw-budget")) as process:
        yield process


def test_budget_refuses_with_429_and_retry_after(gateway: GatewayProcess) -> None:
    # One request holds 3 + 2 * 10 = 23 micro-dollars; the budget covers two.
    key, key_id = make_key(gateway.config_path, team="refuse", budget_micro=50)
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
    for _ in range(2):
        client.completions.create(
            model="tiny-lm", prompt=PROMPT, max_tokens=10, extra_body={"ignore_eos": True}
        )
    with pytest.raises(openai.RateLimitError) as refused:
        client.completions.create(model="tiny-lm", prompt=PROMPT, max_tokens=10)
    assert refused.value.response.headers["retry-after"].isdigit()
    assert refused.value.body["type"] == "insufficient_quota"  # type: ignore[index]
    row = spend_by(gateway.config_path, "key")[key_id]
    assert row.cost_micro == 46
    assert row.requests == 2


def test_concurrent_requests_cannot_overshoot(gateway: GatewayProcess) -> None:
    key, key_id = make_key(gateway.config_path, team="burst", budget_micro=100)

    async def one(http: httpx.AsyncClient) -> int:
        reply = await http.post(
            "/v1/completions",
            json={"model": "tiny-lm", "prompt": PROMPT, "max_tokens": 10, "ignore_eos": True},
            headers={"authorization": f"Bearer {key}"},
        )
        return reply.status_code

    async def burst() -> list[int]:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            return list(await asyncio.gather(*(one(http) for _ in range(12))))

    codes = asyncio.run(burst())
    assert codes.count(200) == 4  # 4 * 23 = 92 <= 100 < 5 * 23
    assert codes.count(429) == 8
    assert spend_by(gateway.config_path, "key")[key_id].cost_micro == 92


def test_clamp_lowers_max_tokens_to_the_budget(pods: Pods, tmp_path: Path) -> None:
    config = base_config(pods, defaults={"maxTokens": 256, "onBudgetShort": "clamp"})
    with GatewayProcess(config, tmp_path) as gateway:
        key, _ = make_key(gateway.config_path, budget_micro=23)
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key=key, max_retries=0)
        result = client.completions.create(
            model="tiny-lm", prompt=PROMPT, max_tokens=100, extra_body={"ignore_eos": True}
        )
        assert result.usage is not None
        assert result.usage.completion_tokens == 10  # (23 - 3) / 2
        assert result.choices[0].finish_reason == "length"


def test_cancelled_stream_is_charged_prompt_plus_tokens_sent(gateway: GatewayProcess) -> None:
    key, key_id = make_key(gateway.config_path, team="cancel")
    received = 0
    with (
        httpx.Client(base_url=gateway.url, timeout=60) as http,
        http.stream(
            "POST",
            "/v1/completions",
            json={
                "model": "tiny-lm",
                "prompt": PROMPT,
                "max_tokens": 256,
                "stream": True,
                "ignore_eos": True,
            },
            headers={"authorization": f"Bearer {key}"},
        ) as reply,
    ):
        for line in reply.iter_lines():
            if line.startswith("data: {"):
                received += 1
            if received == 3:
                break  # leave mid-stream: the connection closes here
    wait_until(
        lambda: key_id in spend_by(gateway.config_path, "key"),
        timeout_s=20,
        what="cancel settled",
    )
    row = spend_by(gateway.config_path, "key")[key_id]
    sent = row.completion_tokens
    assert received <= sent < 256
    assert row.prompt_tokens == 3
    assert row.cost_micro == 3 + 2 * sent


def test_a_tpm_refusal_waits_for_holds_to_give_tokens_back(gateway: GatewayProcess) -> None:
    # A stream holds 3 + 256 tokens of a 300-token tpm window; a request for 100 more does
    # not fit while it is out. The stream is abandoned after its first event and settles
    # at its prompt plus the tokens sent: the waiting request then fits. Before, it was a
    # 429 saying to come back when the minute turned.
    key, key_id = make_key(gateway.config_path, team="tpm-wait", tpm=300)
    headers = {"authorization": f"Bearer {key}"}
    stream_body = {"model": "tiny-lm", "prompt": PROMPT, "max_tokens": 256, "stream": True}
    stream_body["ignore_eos"] = True

    async def scenario() -> httpx.Response:
        async with httpx.AsyncClient(base_url=gateway.url, timeout=60) as http:
            async with http.stream(
                "POST", "/v1/completions", json=stream_body, headers=headers
            ) as stream:
                assert stream.status_code == 200
                async for line in stream.aiter_lines():
                    if line.startswith("data: {"):
                        break
                waiting = asyncio.ensure_future(
                    http.post(
                        "/v1/completions",
                        json={"model": "tiny-lm", "prompt": PROMPT, "max_tokens": 100},
                        headers=headers,
                    )
                )
                await asyncio.sleep(0.2)  # let it reach the gateway while the stream holds
            return await waiting  # the stream's connection closed above

    reply = asyncio.run(scenario())
    assert reply.status_code == 200, reply.text
    wait_for_ledger_rows(gateway.config_path, key_id, 2, "both requests settled")


def test_a_crashed_gateways_reservation_expires_and_is_charged(pods: Pods, tmp_path: Path) -> None:
    config = base_config(pods, defaults={"maxTokens": 256, "leaseS": 1.0})
    first = GatewayProcess(config, tmp_path).start()
    key, key_id = make_key(first.config_path, team="crash")
    http = httpx.Client(base_url=first.url, timeout=60)
    try:
        with http.stream(
            "POST",
            "/v1/completions",
            json={"model": "tiny-lm", "prompt": PROMPT, "stream": True, "ignore_eos": True},
            headers={"authorization": f"Bearer {key}"},
        ) as reply:
            assert reply.status_code == 200
            lines = reply.iter_lines()
            assert next(lines).startswith("data: {")
            first.send_signal(signal.SIGKILL)  # dies holding the reservation
            first.wait_exit()
            with contextlib.suppress(httpx.HTTPError):  # the stream breaks with it
                for _ in lines:
                    pass
    finally:
        http.close()
        first.stop()
    with GatewayProcess(config, tmp_path) as second:
        wait_until(
            lambda: key_id in spend_by(second.config_path, "key"),
            timeout_s=20,
            what="lease expiry",
        )
        row = spend_by(second.config_path, "key")[key_id]
    # Charged the whole reservation: prompt plus the default cap of 256.
    assert row.completion_tokens == 256
    assert row.cost_micro == 3 + 2 * 256
