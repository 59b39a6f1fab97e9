"""The hold covers what an OpenAI-compatible upstream (vLLM, OpenAI's legacy completions)
bills for the request shapes it takes beyond the pod's: a batch of prompts (every choice
generated for each), chat text parts joined with "\\n", custom roles. And a body the gateway
could not re-encode for the upstream (nested past orjson's depth) is refused before its
reservation, not admitted and then failed with a 500 while its hold stayed.

The upstream here is `VllmLike`, a real HTTP server on loopback (aiohttp.web, in a thread
of this process) that bills as vLLM does: its prompt counts are tiny-lm's tokenizer over
the prompt vLLM would build, and it generates every choice's whole `max_tokens` (no EOS,
the most a server honouring the cap may do)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from aiohttp import web

from podserve.gateway.counting import PromptCounting
from podserve.gateway.tokens import TokenizerCount
from podserve.gateway.wire import (
    MAX_CHOICES,
    MAX_NESTING_DEPTH,
    BadRequest,
    Endpoint,
    billable,
    forwarded_body,
    parse_body,
)
from tests.gateway.support import TINY_LM, GatewayProcess, make_key, spend_by, wait_for_ledger_rows

TOKENIZER = TINY_LM / "tokenizer.json"
MODELS = ("vllm", "toolcalls", "reasoning", "partialusage")


def _tokens(text: str) -> int:
    from tokenizers import Tokenizer

    return len(Tokenizer.from_file(str(TOKENIZER)).encode(text, add_special_tokens=True).ids)


def vllm_prompt_tokens(body: dict[str, Any], chat: bool) -> list[int]:
    """Each prompt's tokens as vLLM builds it: chat text parts joined with "\\n"
    (chat_utils `_parse_chat_message_content_parts`), the role printed by the template
    (a ChatML-like one here); a completions batch is one prompt per item."""
    if chat:
        total = 2
        for message in body["messages"]:
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(p.get("text", "") for p in content)
            total += _tokens(f"<|{message.get('role')}|>\n{content or ''}\n")
        return [total]
    prompt = body["prompt"]
    if isinstance(prompt, str):
        return [_tokens(prompt)]
    if all(isinstance(t, int) for t in prompt):
        return [len(prompt)]
    return [_tokens(p) if isinstance(p, str) else len(p) for p in prompt]


class VllmLike:
    """An OpenAI-compatible upstream billing as vLLM does; its behaviour is the model's:
    `vllm` honest; `toolcalls` / `reasoning` stream `STALL_AFTER` deltas of tool-call
    arguments / of `reasoning_content` and `reasoning`, then wait for the client to go;
    `partialusage` reports a usage of `prompt_tokens` alone."""

    STALL_AFTER = 30

    def __init__(self) -> None:
        self.port = 0
        self.bodies: list[dict[str, Any]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop = asyncio.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body: dict[str, Any] = await request.json()
        self.bodies.append(body)
        chat = request.path.endswith("/chat/completions")
        prompts = vllm_prompt_tokens(body, chat)
        cap = body.get("max_completion_tokens") or body.get("max_tokens") or 16
        choices = len(prompts) * (body.get("n") or 1)
        usage: dict[str, int] = {
            "prompt_tokens": sum(prompts),
            "completion_tokens": cap * choices,
            "total_tokens": sum(prompts) + cap * choices,
        }
        if body["model"] == "partialusage":
            usage = {"prompt_tokens": sum(prompts)}
        if not body.get("stream"):
            key = "message" if chat else "text"
            text: Any = {"role": "assistant", "content": "x" * cap} if chat else "x" * cap
            made = [{"index": i, key: text, "finish_reason": "length"} for i in range(choices)]
            return web.json_response({"id": "x", "choices": made, "usage": usage})
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(request)
        await reply.write(_event({"choices": [{"index": 0, "delta": {"role": "assistant"}}]}))
        if body["model"] in ("toolcalls", "reasoning"):
            for t in range(self.STALL_AFTER):
                await reply.write(_event({"choices": [{"index": 0, "delta": _delta(body, t)}]}))
            await self._stop.wait()  # the gateway hangs up meanwhile: the client went
            return reply
        for _ in range(cap):
            await reply.write(_event({"choices": [{"index": 0, "delta": {"content": "x"}}]}))
        await reply.write(_event({"choices": [], "usage": usage}))
        await reply.write(b"data: [DONE]\n\n")
        return reply

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/v1/completions", self._handle)
        app.router.add_post("/v1/chat/completions", self._handle)
        runner = web.AppRunner(app)
        self._loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = runner.addresses[0][1]
        self._ready.set()
        self._loop.run_forever()
        self._loop.run_until_complete(runner.cleanup())
        self._loop.close()

    def __enter__(self) -> VllmLike:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the vLLM-like stand-in did not start")
        return self

    def __exit__(self, *_: object) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _event(payload: object) -> bytes:
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def _delta(body: dict[str, Any], t: int) -> dict[str, Any]:
    if body["model"] == "toolcalls":  # vLLM's tool parsers: the name first, then arguments
        call: dict[str, Any] = {"index": 0, "function": {"arguments": "x"}}
        if t == 0:
            call.update(id="call_1", type="function", function={"name": "f"})
        return {"tool_calls": [call]}
    return {"reasoning_content" if t % 2 else "reasoning": "x"}


def gateway_config(upstream: VllmLike) -> dict[str, Any]:
    return {
        "store": {"kind": "sqlite", "path": "gateway.db"},
        "fallbacks": [
            {
                "name": "vllm",
                "baseUrl": f"http://127.0.0.1:{upstream.port}/v1",
                "models": list(MODELS),
            }
        ],
        "prices": {
            m: {"inputPerMillionUsd": 1.0, "outputPerMillionUsd": 2.0, "tokenizer": str(TOKENIZER)}
            for m in MODELS
        },
        "defaults": {"maxTokens": 64},
        "storeTimeoutMs": 3000,
    }


@pytest.fixture(scope="module")
def upstream() -> Iterator[VllmLike]:
    pytest.importorskip("tokenizers")
    with VllmLike() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: VllmLike, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work: Path = tmp_path_factory.mktemp("hold-shapes")
    with GatewayProcess(gateway_config(upstream), work) as process:
        yield process


def post(gateway: Any, key: str, path: str, body: object) -> httpx.Response:
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        return client.post(path, json=body, headers={"authorization": f"Bearer {key}"})


# --- unit: what the hold reads from the body ------------------------------------------
def test_a_batch_of_prompts_holds_every_choice_of_every_prompt() -> None:
    strings = billable({"model": "m", "prompt": ["a", "b", "c"], "n": 2}, Endpoint.COMPLETIONS)
    assert strings.choices == 6
    assert strings.texts == ("a", "b", "c")
    ids = billable({"model": "m", "prompt": [[1, 2], [3], [4, 5, 6]]}, Endpoint.COMPLETIONS)
    assert (ids.choices, ids.token_ids) == (3, 6)
    flat = billable({"model": "m", "prompt": [1, 2, 3], "n": 4}, Endpoint.COMPLETIONS)
    assert (flat.choices, flat.token_ids) == (4, 3)  # a flat list of ids is one prompt
    one = billable({"model": "m", "prompt": "a", "n": 3}, Endpoint.COMPLETIONS)
    assert one.choices == 3
    embeddings = billable({"model": "m", "input": ["a", "b", "c"]}, Endpoint.EMBEDDINGS)
    assert embeddings.choices == 1


def test_best_of_is_held_when_larger_than_n() -> None:
    body = {"model": "m", "prompt": ["a", "b"], "n": 2, "best_of": 5}
    assert billable(body, Endpoint.COMPLETIONS).choices == 10
    chat = {"model": "m", "messages": [{"role": "user", "content": "a"}], "best_of": 3}
    assert billable(chat, Endpoint.CHAT).choices == 3
    for bad in (0, "2", MAX_CHOICES + 1):
        with pytest.raises(BadRequest, match="best_of"):
            billable({**body, "best_of": bad}, Endpoint.COMPLETIONS)


def test_a_batch_past_the_choice_bound_is_refused() -> None:
    """prompts x n is bounded as n is: the largest hold stays exact in the stores."""
    fits = {"model": "m", "prompt": ["a"] * 64, "n": 2}
    assert billable(fits, Endpoint.COMPLETIONS).choices == MAX_CHOICES
    with pytest.raises(BadRequest, match=f"at most {MAX_CHOICES} completions"):
        billable({**fits, "n": 3}, Endpoint.COMPLETIONS)


def test_text_parts_are_joined_as_vllm_joins_them() -> None:
    parts = [{"type": "text", "text": "ab"}] * 3 + [{"type": "image_url", "image_url": {}}]
    bill = billable({"model": "m", "messages": [{"role": "user", "content": parts}]}, Endpoint.CHAT)
    assert bill.texts == ("ab\nab\nab",)
    assert bill.media_parts == 1
    assert bill.layout_tokens == 3  # a token for each join, for the pod's "" join


def test_parts_vllm_reads_as_text_are_counted_as_text() -> None:
    """vLLM's MM_PARSER_MAP reads these as text: held as one media part each, a long
    refusal or thinking part was outside the hold."""
    parts = [
        {"type": "refusal", "refusal": "no"},
        {"type": "thinking", "thinking": "hm"},
        {"type": "input_text", "text": "in"},
        {"type": "output_text", "text": "out"},
        {"type": "tool_reference", "name": "f"},
    ]
    bill = billable({"model": "m", "messages": [{"role": "user", "content": parts}]}, Endpoint.CHAT)
    assert bill.texts == ("no\nhm\nin\nout\nf",)
    assert bill.media_parts == 0


def test_a_custom_role_is_counted_and_a_standard_one_is_framed() -> None:
    roles = ["system", "user", "assistant", "developer", "tool", "function"]
    framed = [{"role": r, "content": "x"} for r in roles]
    assert billable({"model": "m", "messages": framed}, Endpoint.CHAT).texts == ("x",) * 6
    custom = billable(
        {"model": "m", "messages": [{"role": "ab" * 400, "content": "hi"}]}, Endpoint.CHAT
    )
    assert custom.texts == ("hi", "ab" * 400)
    odd = billable({"model": "m", "messages": [{"role": ["a"], "content": "hi"}]}, Endpoint.CHAT)
    assert len(odd.texts) == 2  # not a string: counted as its JSON, not a TypeError


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("completions", {"model": "m", "prompt": ["def f"] * 50, "max_tokens": 20}),
        ("completions", {"model": "m", "prompt": [[1, 2, 3]] * 50, "max_tokens": 20, "n": 2}),
        (
            "chat",
            {
                "model": "m",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}] * 200}],
            },
        ),
        (
            "chat",
            {"model": "m", "max_tokens": 1, "messages": [{"role": "ab" * 400, "content": "hi"}]},
        ),
    ],
)
async def test_the_hold_covers_what_vllm_bills(path: str, body: dict[str, Any]) -> None:
    """The probe's shapes, counted with tiny-lm's tokenizer: prompt and output held are at
    least what a vLLM-like server bills (vllm_prompt_tokens), and at least the pod's
    own prompt for the chat shapes it takes (text parts joined with "")."""
    pytest.importorskip("tokenizers")
    chat = path == "chat"
    bill = billable(body, Endpoint.CHAT if chat else Endpoint.COMPLETIONS)
    counting = PromptCounting({"m": TokenizerCount(TOKENIZER)})
    try:
        held = await counting.prompt_tokens(bill)
    finally:
        counting.close()
    prompts = vllm_prompt_tokens(body, chat)
    assert held >= sum(prompts)
    assert body["max_tokens"] * bill.choices == body["max_tokens"] * len(prompts) * body.get("n", 1)
    if chat and isinstance(body["messages"][0]["content"], list):
        pod = "".join(p["text"] for p in body["messages"][0]["content"])
        assert held >= _tokens(pod) + 8 + 8


# --- unit: nesting past what can be re-encoded ----------------------------------------
def _nested(depth: int) -> bytes:
    """A body whose pass-through field makes it `depth` levels deep in all."""
    inner = b"[" * (depth - 1) + b"]" * (depth - 1)
    return b'{"model":"m","prompt":"a","metadata":' + inner + b"}"


def test_the_deepest_body_accepted_is_forwarded() -> None:
    body = parse_body(_nested(MAX_NESTING_DEPTH))
    bill = billable(body, Endpoint.COMPLETIONS)
    assert orjson.loads(forwarded_body(body, bill, 5, True))["max_tokens"] == 5


@pytest.mark.parametrize("depth", [MAX_NESTING_DEPTH + 1, 300, 1024])
def test_a_body_too_deep_to_forward_is_refused_when_parsed(depth: int) -> None:
    with pytest.raises(BadRequest, match="nesting depth limit"):
        parse_body(_nested(depth))


def test_brackets_inside_strings_do_not_refuse_a_body() -> None:
    body = parse_body(orjson.dumps({"model": "m", "prompt": "[{" * 5000}))
    assert body["prompt"] == "[{" * 5000


# --- end to end: a gateway in front of the vLLM-like upstream --------------------------
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/completions", {"model": "vllm", "prompt": ["def f"] * 50, "max_tokens": 20}),
        ("/v1/completions", {"model": "vllm", "prompt": [[1, 2, 3]] * 50, "max_tokens": 20}),
        (
            "/v1/chat/completions",
            {
                "model": "vllm",
                "max_tokens": 1,
                "messages": [{"role": "user", "content": [{"type": "text", "text": "ab"}] * 200}],
            },
        ),
        (
            "/v1/chat/completions",
            {"model": "vllm", "max_tokens": 1, "messages": [{"role": "ab" * 400, "content": "hi"}]},
        ),
    ],
)
def test_a_vllm_shaped_request_never_spends_past_the_budget(
    gateway: Any, path: str, body: dict[str, Any]
) -> None:
    """Each body's bill (2,100 micro-dollars for the batches, ~400 for the chats) is past
    the 300 budget; held at one prompt's choices, joined without separators or without
    its role, each was admitted and billed 406 to 2,150 against it."""
    key, key_id = make_key(gateway.config_path, budget_micro=300)
    reply = post(gateway, key, path, body)
    # refused: a 429, or a 400 where the hold is past the key's whole budget
    assert reply.status_code in (400, 429), reply.text
    assert "budget" in reply.json()["error"]["message"]
    row = spend_by(gateway.config_path, "key").get(key_id)
    assert row is None or row.cost_micro <= 300


def test_a_batch_within_budget_is_served_and_settled_on_its_usage(
    gateway: Any, upstream: VllmLike
) -> None:
    key, key_id = make_key(gateway.config_path, budget_micro=5_000)
    body = {"model": "vllm", "prompt": ["def f"] * 10, "max_tokens": 20, "n": 2}
    reply = post(gateway, key, "/v1/completions", body)
    assert reply.status_code == 200, reply.text
    assert len(reply.json()["choices"]) == 20
    assert upstream.bodies[-1]["max_tokens"] == 20  # the cap forwarded is each choice's
    wait_for_ledger_rows(gateway.config_path, key_id, 1, "the batch's settlement")
    row = spend_by(gateway.config_path, "key")[key_id]
    assert row.completion_tokens == 400
    assert row.cost_micro <= 5_000


def test_a_body_too_deep_to_forward_is_a_400_that_holds_nothing(gateway: Any) -> None:
    """It was a 500 after admission, its hold (8,002) kept until its lease: the next
    request on the key (3,002) did not fit the 10,000 budget."""
    key, key_id = make_key(gateway.config_path, budget_micro=10_000)
    deep = b'{"model":"vllm","prompt":"def f","max_tokens":4000,"metadata":'
    deep += b"[" * 300 + b"]" * 300 + b"}"
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        reply = client.post(
            "/v1/completions",
            content=deep,
            headers={"authorization": f"Bearer {key}", "content-type": "application/json"},
        )
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert "nesting depth limit" in error["message"]
    assert set(error) == {"message", "type", "param", "code"}
    body = {"model": "vllm", "prompt": "def f", "max_tokens": 1500}
    assert post(gateway, key, "/v1/completions", body).status_code == 200
    wait_for_ledger_rows(gateway.config_path, key_id, 1, "the second request's settlement")
    assert spend_by(gateway.config_path, "key")[key_id].requests == 1
