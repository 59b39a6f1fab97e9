"""Work whose size a client chooses never stalls the gateway's event loop, and overload is
refused cheaply: prompts are counted off the loop (or bounded by bytes when the counting
thread is behind), and requests and body bytes in flight are bounded.

The gateway runs in this test's event loop (its ASGI app under httpx's ASGITransport, in
front of the real pods), so the test can hold the real tokenizer call at a gate: with the
old counting on the loop, nothing could answer `/healthz` while the gate was shut.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from podserve.config.gateway_config import load_gateway_config
from podserve.gateway import counting
from podserve.gateway.app import Gateway
from podserve.gateway.store.base import Dimension
from podserve.gateway.stores import open_store
from podserve.gateway.tokens import ByteBound, TokenizerCount
from podserve.gateway.usage import FULL_PARSE_MAX_BYTES
from podserve.httpedge.decoding import INLINE_BYTES
from podserve.protocol.json_body import MAX_JSON_VALUES
from tests.gateway.conftest import Pods, base_config
from tests.gateway.support import create_key
from tests.support.gate import Gate, probed_while_held, until

pytestmark = pytest.mark.asyncio(loop_scope="function")

LONG_PROMPT = "hi " * 200  # 600 characters: past INLINE_CHARS, well inside tiny-lm's context


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    state = Gate()
    real = TokenizerCount.counts

    def gated(self: TokenizerCount, texts: Any) -> list[int]:
        state.pass_through()
        return real(self, texts)

    monkeypatch.setattr(TokenizerCount, "counts", gated)
    yield state
    state.opened.set()


@dataclass
class InProcess:
    client: httpx.AsyncClient
    gateway: Gateway
    headers: dict[str, str]


@contextlib.asynccontextmanager
async def _in_process(pods: Pods, workdir: Path, **overrides: Any) -> AsyncIterator[InProcess]:
    key_flags = overrides.pop("_key_flags", ())
    config_dict = base_config(pods, store={"kind": "sqlite", "path": str(workdir / "gw.db")})
    config_dict.update(overrides)
    config_path = workdir / "gateway.yaml"
    config_path.write_text(yaml.safe_dump(config_dict))
    # The CLI runs its own event loop: off this one.
    key = await asyncio.to_thread(create_key, config_path, "--team", "big", *key_flags)
    config = load_gateway_config(config_path.read_text())
    gateway = Gateway(config, open_store(config, {}), {})
    await gateway.startup()
    # App types its scope as a dict, httpx as a MutableMapping: the same object at run time.
    transport = httpx.ASGITransport(app=gateway.asgi())  # type: ignore[arg-type]
    try:
        async with httpx.AsyncClient(
            transport=transport, base_url="http://gateway", timeout=60
        ) as client:
            yield InProcess(client, gateway, {"authorization": f"Bearer {key}"})
    finally:
        await gateway.shutdown()


@pytest.fixture
async def gw(pods: Pods, tmp_path: Path) -> AsyncIterator[InProcess]:
    async with _in_process(pods, tmp_path) as found:
        yield found


def completion(prompt: str | list[str]) -> dict[str, Any]:
    return {"model": "tiny-lm", "prompt": prompt, "max_tokens": 2}


async def test_probes_answer_while_a_long_prompt_is_counted(gw: InProcess, gate: Gate) -> None:
    health, response = await probed_while_held(
        gate,
        gw.client.post("/v1/completions", json=completion(LONG_PROMPT), headers=gw.headers),
        lambda: gw.client.get("/healthz"),
    )
    assert health.status_code == 200
    assert response.status_code == 200, response.text
    assert gate.opened_in_time == [True]
    assert gate.threads == ["podserve-gw-count_0"]
    assert gw.gateway.accounting.counting.backlog_chars == 0


async def test_a_short_prompt_is_counted_on_the_loop(gw: InProcess, gate: Gate) -> None:
    gate.opened.set()
    response = await gw.client.post(
        "/v1/completions", json=completion("def add(a, b):"), headers=gw.headers
    )
    assert response.status_code == 200, response.text
    assert gate.threads == [threading.current_thread().name]


async def test_many_short_texts_are_counted_off_the_loop(gw: InProcess, gate: Gate) -> None:
    """Few characters, many texts: a tokenizer call costs per text too (700 K empty
    messages were 10 s of counting on the loop), so past INLINE_TEXTS it is the thread's."""
    prompts = [""] * (counting.INLINE_TEXTS + 1)
    health, _ = await probed_while_held(  # (the pod's answer to empty prompts is not the point)
        gate,
        gw.client.post("/v1/completions", json=completion(prompts), headers=gw.headers),
        lambda: gw.client.get("/healthz"),
    )
    assert health.status_code == 200
    assert gate.opened_in_time == [True]
    assert gate.threads == ["podserve-gw-count_0"]


async def test_a_big_body_is_parsed_and_checked_off_the_loop(
    gw: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A million one-id lists in 4 MiB kept /healthz waiting 0.8 s while the loop parsed and
    walked them; past INLINE_BYTES that work is the parsing thread's."""
    from podserve.gateway import body_parse

    parse_gate = Gate()
    real = body_parse._parse
    collecting: list[bool] = []

    def gated(raw: bytes, endpoint: Any) -> Any:
        parse_gate.pass_through()
        collecting.append(gc.isenabled())
        return real(raw, endpoint)

    monkeypatch.setattr(body_parse, "_parse", gated)
    body = {**completion("def add(a, b):"), "user": "u" * INLINE_BYTES}
    request = asyncio.create_task(gw.client.post("/v1/completions", json=body, headers=gw.headers))
    await until(parse_gate.entered)
    assert (await gw.client.get("/healthz")).status_code == 200
    assert not request.done()
    parse_gate.opened.set()
    response = await request
    assert response.status_code == 200, response.text
    assert parse_gate.opened_in_time == [True]
    assert parse_gate.threads == ["podserve-gw-parse_0"]
    # the collector was off while the thread parsed (httpedge/decoding.py), and is on again
    assert collecting == [False]
    assert gc.isenabled()


async def test_a_body_of_millions_of_tiny_values_is_refused_unparsed(
    gw: InProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four million one-id lists in 16 MiB: refused on the count of their commas and
    brackets (the pod's bound, protocol/json_body.py) before orjson builds any of them,
    and never forwarded."""
    import orjson

    parsed: list[bytes] = []
    real = orjson.loads

    def watched(raw: bytes) -> Any:
        parsed.append(raw)
        return real(raw)

    monkeypatch.setattr("podserve.gateway.wire.orjson.loads", watched)
    ids = b"[" + b"[1]," * (MAX_JSON_VALUES // 2) + b"[1]]"
    body = b'{"model": "tiny-lm", "max_tokens": 1, "prompt": ' + ids + b"}"
    response = await gw.client.post(
        "/v1/completions", content=body, headers={**gw.headers, "content-type": "application/json"}
    )
    assert response.status_code == 400, response.text[:300]
    assert f"at most {MAX_JSON_VALUES}" in response.json()["error"]["message"]
    assert parsed == []


async def test_a_prompt_longer_than_the_backlog_is_bounded_by_its_bytes(
    gw: InProcess, gate: Gate
) -> None:
    """Never tokenized (the gate is never entered); the byte bound reserves for it. The
    pod then refuses a prompt that can never fit its context, before tokenizing too."""
    huge = "a" * (counting.MAX_BACKLOG_CHARS + 1)
    response = await gw.client.post("/v1/completions", json=completion(huge), headers=gw.headers)
    assert response.status_code == 400, response.text
    assert "characters" in response.json()["error"]["message"]
    assert gate.threads == []


async def test_the_byte_bound_reserves_at_least_the_tokens(
    pods: Pods, tmp_path: Path, gate: Gate
) -> None:
    """A key with USD 1 of budget at USD 1 per million input tokens: a prompt of over a
    million bytes, too long to tokenize, is refused on its byte bound alone (a 400: its
    hold is over the key's whole budget, so no wait could admit it)."""
    async with _in_process(pods, tmp_path, _key_flags=("--budget-usd", "1")) as gw:
        huge = "a" * 1_000_001 + "b" * (counting.MAX_BACKLOG_CHARS)
        response = await gw.client.post(
            "/v1/completions", json=completion(huge), headers=gw.headers
        )
        assert response.status_code == 400, response.text
        assert "whole budget of 1000000 micro-dollars" in response.json()["error"]["message"]
        assert gate.threads == []


async def test_requests_past_max_in_flight_are_refused_before_their_body(
    pods: Pods, tmp_path: Path, gate: Gate
) -> None:
    async with _in_process(pods, tmp_path, maxInFlight=1) as gw:
        held = asyncio.create_task(
            gw.client.post("/v1/completions", json=completion(LONG_PROMPT), headers=gw.headers)
        )
        await until(gate.entered)  # the one slot is taken
        refused = await gw.client.post(
            "/v1/completions", json=completion("def"), headers=gw.headers
        )
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "1"
        assert refused.json()["error"]["code"] == "overloaded"
        assert (await gw.client.get("/healthz")).status_code == 200  # never counted
        gate.opened.set()
        assert (await held).status_code == 200
        again = await gw.client.post("/v1/completions", json=completion("def"), headers=gw.headers)
        assert again.status_code == 200, again.text
        metrics = (await gw.client.get("/metrics")).text
        assert 'podserve_gateway_rejections_total{reason="overloaded"} 1.0' in metrics
        assert gw.gateway.inflight.requests == 0
        assert gw.gateway.inflight.body_bytes == 0


async def test_body_bytes_in_flight_are_bounded(pods: Pods, tmp_path: Path, gate: Gate) -> None:
    limit = 64 * 1024
    async with _in_process(pods, tmp_path, maxBodyBytes=limit, maxBodyBytesInFlight=limit) as gw:
        big = completion(LONG_PROMPT + " " * (40 * 1024))  # counted off the loop: held at the gate
        held = asyncio.create_task(gw.client.post("/v1/completions", json=big, headers=gw.headers))
        await until(gate.entered)
        second = await gw.client.post(
            "/v1/completions", json=completion("x" * (30 * 1024)), headers=gw.headers
        )
        assert second.status_code == 503
        assert "bytes of request bodies in flight" in second.json()["error"]["message"]
        small = await gw.client.post("/v1/completions", json=completion("def"), headers=gw.headers)
        assert small.status_code == 200, small.text
        gate.opened.set()
        assert (await held).status_code in (200, 400)  # the pod judges the long prompt
        assert gw.gateway.inflight.body_bytes == 0


async def test_a_large_embeddings_response_is_billed_from_its_usage(gw: InProcess) -> None:
    """60 inputs answer with ~450 KB of JSON: past the full-parse size, so the usage is
    read from the end; the ledger must hold exactly what the pod reported."""
    inputs = [f"sentence number {i} about a function" for i in range(60)]
    response = await gw.client.post(
        "/v1/embeddings", json={"model": "minilm", "input": inputs}, headers=gw.headers
    )
    assert response.status_code == 200, response.text
    assert len(response.content) > FULL_PARSE_MAX_BYTES
    reported = response.json()["usage"]["prompt_tokens"]
    assert await _held_prompt_tokens(gw) == reported


async def test_a_response_past_max_response_bytes_is_a_502_charged_its_hold(
    pods: Pods, tmp_path: Path
) -> None:
    """The embeddings answer (~15 KB for two inputs) is over the 4 KiB cap: not held whole,
    a 502 naming the cap, and the ledger charges what the reservation held (the pod did
    the work; its usage was in the body not read)."""
    async with _in_process(pods, tmp_path, maxResponseBytes=4096) as gw:
        response = await gw.client.post(
            "/v1/embeddings", json={"model": "minilm", "input": ["a b", "c d"]}, headers=gw.headers
        )
        assert response.status_code == 502
        assert "maxResponseBytes" in response.json()["error"]["message"]
        held = await _held_prompt_tokens(gw)
        assert held == ByteBound().count(["a b", "c d"])  # minilm has no tokenizer configured
        small = await gw.client.post(
            "/v2/models/iris/infer",
            json={
                "inputs": [
                    {
                        "name": "features",
                        "shape": [1, 4],
                        "datatype": "FP32",
                        "data": [5.1, 3.5, 1.4, 0.2],
                    }
                ]
            },
            headers=gw.headers,
        )
        assert small.status_code == 200, small.text  # a small answer passes the cap


async def _held_prompt_tokens(gw: InProcess) -> int:
    for _ in range(400):  # settlement runs after the response (and SQLite commits in groups)
        rows = await gw.gateway.accounting.store.spend(Dimension.MODEL)
        found = [r.prompt_tokens for r in rows if r.group == "minilm"]
        if found:
            return found[0]
        await asyncio.sleep(0.025)
    raise AssertionError("no ledger row for minilm")


async def test_a_response_not_yet_sent_still_counts_in_flight(pods: Pods, tmp_path: Path) -> None:
    """A client that does not read its response keeps the request in flight: the gateway
    still holds the body. Driven through the gateway's ASGI app with a `send` that blocks
    on the body, as uvicorn's does while a slow reader's socket is full."""
    async with _in_process(pods, tmp_path, maxInFlight=1) as gw:
        app = gw.gateway.asgi()
        body = json.dumps(
            {
                "inputs": [
                    {
                        "name": "features",
                        "shape": [1, 4],
                        "datatype": "FP32",
                        "data": [5.1, 3.5, 1.4, 0.2],
                    }
                ]
            }
        ).encode()
        unblock = asyncio.Event()
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.body":
                await unblock.wait()
            sent.append(message)

        headers = [(k.encode(), v.encode()) for k, v in gw.headers.items()]
        headers.append((b"content-length", str(len(body)).encode()))
        scope = {
            "type": "http",
            "method": "POST",
            "path": "/v2/models/iris/infer",
            "headers": headers,
        }
        slow = asyncio.create_task(app(scope, receive, send))
        for _ in range(2000):
            if sent:  # the headers went out; the body waits for the reader
                break
            await asyncio.sleep(0.005)
        assert sent
        assert sent[0]["status"] == 200
        refused = await gw.client.post("/v2/models/iris/infer", content=body, headers=gw.headers)
        assert refused.status_code == 503
        assert "in flight" in refused.json()["error"]  # OIP's shape on /v2
        unblock.set()
        await slow
        assert gw.gateway.inflight.requests == 0
        assert gw.gateway.inflight.body_bytes == 0
        again = await gw.client.post("/v2/models/iris/infer", content=body, headers=gw.headers)
        assert again.status_code == 200, again.text
