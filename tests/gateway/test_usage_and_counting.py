"""Pure parts of the large-request handling: reading `usage` from the end of a large
response, and the counting thread's backlog (a prompt past it is bounded by its bytes)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest

from podserve.gateway import counting
from podserve.gateway.budget import Usage
from podserve.gateway.counting import PromptCounting
from podserve.gateway.tokens import SPECIALS_PER_TEXT
from podserve.gateway.usage import FULL_PARSE_MAX_BYTES, billed_usage, reported_usage

FILLER = [{"index": i, "embedding": [0.125] * 384} for i in range(64)]


def _body(**fields: object) -> bytes:
    return orjson.dumps({"object": "list", "data": FILLER, **fields})


def test_a_small_response_is_parsed_whole() -> None:
    body = orjson.dumps({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}})
    assert reported_usage(body) == Usage(3, 4)


def test_a_large_response_is_read_from_its_usage_at_the_end() -> None:
    body = _body(usage={"prompt_tokens": 512, "total_tokens": 512})
    assert len(body) > FULL_PARSE_MAX_BYTES
    assert reported_usage(body) == Usage(512, 0)


def test_keys_after_usage_and_nested_details_are_fine() -> None:
    """OpenAI sends `service_tier` and `system_fingerprint` after `usage`, and details
    objects inside it."""
    usage = {
        "prompt_tokens": 9,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 0},
        "completion_tokens_details": {"reasoning_tokens": 0},
    }
    body = _body(usage=usage, service_tier="default", system_fingerprint="fp_{x}")
    assert reported_usage(body) == Usage(9, 7)
    spaced = body.replace(b'"usage":', b'"usage" :\n ')
    assert reported_usage(spaced) == Usage(9, 7)


def test_only_the_usage_object_is_parsed_past_the_size() -> None:
    """The body before `usage` is not even valid JSON here: a whole-body parse would fail,
    so this shows the large path reads only the usage object."""
    body = b'{"data": [' + b"not json " * 10_000 + b'], "usage": {"prompt_tokens": 2}}'
    assert reported_usage(body) == Usage(2, 0)


def test_usage_inside_a_string_is_not_taken_for_the_key() -> None:
    text = 'the model said {"usage": {"prompt_tokens": 1}} here'
    body = _body(choices=[{"text": text}])
    assert b'\\"usage\\"' in body
    assert reported_usage(body) is None


@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": "12"},
        {"prompt_tokens": -1},
        {"prompt_tokens": True},
        {"completion_tokens": 5},
        [1, 2],
        # an invalid completion count makes the whole usage unreadable (it was taken for 0)
        {"prompt_tokens": 3, "completion_tokens": -5},
        {"prompt_tokens": 3, "completion_tokens": True},
        {"prompt_tokens": 3, "completion_tokens": 1.5},
        # past any real request: a cost from it overflowed SQLite's 64-bit integers
        {"prompt_tokens": 2**63 - 1, "completion_tokens": 1},
        {"prompt_tokens": 1, "completion_tokens": 2**32},
    ],
)
def test_a_usage_that_is_not_counts_is_none(usage: object) -> None:
    assert reported_usage(_body(usage=usage)) is None
    assert reported_usage(orjson.dumps({"usage": usage})) is None


def test_no_usage_or_broken_json_is_none() -> None:
    assert reported_usage(_body()) is None
    assert reported_usage(b"{not json") is None
    assert reported_usage(_body(usage={"prompt_tokens": 1})[:-20]) is None


def test_without_usage_every_choice_is_charged_its_cap() -> None:
    """n=3 choices of 16 tokens held 48: a response without usage is charged all of it
    (before, the non-streamed fallback charged one choice's cap)."""
    assert billed_usage(b'{"choices": []}', 5, 16, 3) == Usage(5, 48)
    assert billed_usage(b'{"usage": {"prompt_tokens": 5, "completion_tokens": 9}}', 5, 16, 3) == (
        Usage(5, 9)
    )
    assert billed_usage(b"{}", 7, None, 1) == Usage(7, 0)


class HeldCounter:
    """A tokenizer stand-in that counts one token a character, held until released: the
    backlog policy is what is tested, so the real tokenizer's speed must not matter."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls: list[int] = []

    def counts(self, texts: Sequence[str]) -> list[int]:
        self.calls.append(sum(len(t) for t in texts))
        self.entered.set()
        self.release.wait(timeout=10)
        return [len(t) for t in texts]


async def test_past_the_backlog_a_prompt_is_bounded_by_its_bytes() -> None:
    held = HeldCounter()
    prompts = PromptCounting({"m": held})
    first = "a" * (counting.MAX_BACKLOG_CHARS - 10 - counting.TEXT_COST_CHARS)
    try:
        waiting = asyncio.ensure_future(prompts.count("m", [first]))
        assert await asyncio.to_thread(held.entered.wait, 10)
        # a text costs the backlog its characters and a text's overhead
        assert prompts.backlog_chars == len(first) + counting.TEXT_COST_CHARS
        # 600 more characters would pass the backlog: bounded by bytes, at once, and the
        # UTF-8 bytes of a non-ASCII text, not its characters, plus its special tokens.
        assert await prompts.count("m", ["é" * 600]) == 1200 + SPECIALS_PER_TEXT
        assert held.calls == [len(first)]
        held.release.set()
        assert await waiting == len(first)
        # A short prompt is counted inline, by the counter.
        assert await prompts.count("m", ["short"]) == 5
        assert held.calls == [len(first), 5]
        assert prompts.backlog_chars == 0
    finally:
        held.release.set()
        prompts.close()


async def test_a_cancelled_request_gives_its_backlog_back() -> None:
    held = HeldCounter()
    prompts = PromptCounting({"m": held})
    try:
        task = asyncio.ensure_future(prompts.count("m", ["b" * 5000]))
        assert await asyncio.to_thread(held.entered.wait, 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # the thread is still counting it
        assert prompts.backlog_chars == 5000 + counting.TEXT_COST_CHARS
        held.release.set()
        for _ in range(1000):
            if prompts.backlog_chars == 0:
                break
            await asyncio.sleep(0.005)
        assert prompts.backlog_chars == 0
    finally:
        held.release.set()
        prompts.close()


async def test_a_model_without_a_tokenizer_is_bounded_by_bytes_inline() -> None:
    prompts = PromptCounting({})
    assert await prompts.count("other", ["abc", "ü"]) == 5 + 2 * SPECIALS_PER_TEXT
    prompts.close()


def test_a_null_or_missing_completion_count_is_zero() -> None:
    """Embeddings report no completion tokens (OpenAI leaves the key out)."""
    for usage in ({"prompt_tokens": 4}, {"prompt_tokens": 4, "completion_tokens": None}):
        assert reported_usage(orjson.dumps({"usage": usage})) == Usage(4, 0)


WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_current_weather",
        "description": "Get the current weather in a given location, with a forecast",
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string", "description": "City and state, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
            },
            "required": ["location"],
        },
    },
}


async def test_a_chat_hold_covers_what_a_template_renders_besides_the_contents() -> None:
    """Tools, tool calls with their arguments, names: vLLM renders them into the prompt
    (Llama 3.1's template as `tojson(indent=4)`). Only the contents were counted, so with
    a tool schema a request's real prompt was larger than its hold. Counted with tiny-lm's
    tokenizer, the hold must cover the pretty-printed rendering of each."""
    import json

    from podserve.gateway.tokens import TokenizerCount
    from podserve.gateway.wire import Endpoint, billable
    from tests.gateway.support import TINY_LM

    counter = TokenizerCount(TINY_LM / "tokenizer.json")
    function = {"name": "get_current_weather", "arguments": '{"location": "Paris"}'}
    call = {"id": "call_1", "type": "function", "function": function}
    messages = [
        {"role": "user", "content": "Weather in Paris?", "name": "alice"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    body = {"model": "m", "messages": messages, "tools": [WEATHER_TOOL] * 3}
    bill = billable(body, Endpoint.CHAT)
    held = await PromptCounting({"m": counter}).prompt_tokens(bill)
    rendered = [json.dumps(WEATHER_TOOL, indent=4)] * 3 + [
        json.dumps(m, indent=4) for m in messages
    ]
    assert held >= sum(counter.counts(rendered))
    nested: object = WEATHER_TOOL
    for _ in range(10):  # 14 deep with the tool's own nesting
        nested = {"properties": nested}
    deep = billable({"model": "m", "messages": messages[:1], "tools": [nested]}, Endpoint.CHAT)
    deep_held = await PromptCounting({"m": counter}).prompt_tokens(deep)
    assert deep_held >= sum(counter.counts([json.dumps(nested, indent=4), rendered[3]]))
    contents_only = billable({"model": "m", "messages": messages}, Endpoint.CHAT)
    assert held > await PromptCounting({"m": counter}).prompt_tokens(contents_only) + 300


def test_a_clients_own_chat_template_is_refused() -> None:
    """A template of the client's own can render the messages any number of times: no
    hold can bound it."""
    from podserve.gateway.wire import BadRequest, Endpoint, billable

    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with pytest.raises(BadRequest, match="chat_template"):
        billable(
            {**body, "chat_template": "{% for i in range(9999) %}x{% endfor %}"}, Endpoint.CHAT
        )


def _char_tokenizer(path: Path) -> Path:
    """A tokenizer.json that makes one token of each character: a fallback's tokenizer
    that counts far more than tiny-lm's BPE."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), "isolated")
    out = path / "tokenizer.json"
    tokenizer.save(str(out))
    return out


def test_a_fallback_that_tokenizes_otherwise_is_held_at_the_larger_count(tmp_path: Path) -> None:
    """A hosted fallback knowing the model by another name bills with its own tokenizer:
    the prompt, counted before the upstream is chosen, was held at tiny-lm's count (241
    tokens held, 540 billed in a probe). Held now at the larger of the two counts, or at
    the byte bound when the fallback names no tokenizer."""
    from podserve.config.gateway_config import load_gateway_config
    from podserve.core.errors import InvalidInput
    from podserve.gateway.counting import prompt_counters
    from tests.gateway.support import TINY_LM

    chars = _char_tokenizer(tmp_path)
    base = f"""
pools: [{{name: chat, models: [m], endpoints: ["http://127.0.0.1:1"]}}]
prices:
  m: {{inputPerMillionUsd: 1, outputPerMillionUsd: 2, tokenizer: "{TINY_LM}/tokenizer.json"}}
fallbacks: [{{name: hosted, baseUrl: "http://127.0.0.1:2/v1", models: [m]{{extra}}}}]
"""
    text = "Schwarzwälder Kirschtorte, please: 12345"
    own = load_gateway_config(base.replace("{extra}", ""))
    renamed = load_gateway_config(base.replace("{extra}", ", upstreamModels: {m: x}"))
    named = load_gateway_config(
        base.replace("{extra}", f', upstreamModels: {{m: x}}, tokenizers: {{m: "{chars}"}}')
    )
    tiny = prompt_counters(own)["m"].counts([text])[0]  # same name: same tokenizer assumed
    assert "m" not in prompt_counters(renamed)  # no tokenizer for it: the byte bound
    assert tiny < len(text)  # the BPE count is the smaller one here
    assert prompt_counters(named)["m"].counts([text]) == [len(text)]
    with pytest.raises(InvalidInput, match="tokenizers"):
        load_gateway_config(base.replace("{extra}", f', tokenizers: {{other: "{chars}"}}'))


async def test_an_image_part_is_held_at_the_models_bound_or_refused() -> None:
    """An image's tokens are the model's (LLaVA 1.5: 576 an image); its URL was counted as
    70 bytes of JSON, and a probe spent 602 micro-dollars against a budget of 100. With
    `mediaPartTokens` each non-text part is held at that; without it, refused."""
    from podserve.config.gateway_config import load_gateway_config
    from podserve.gateway.accounting import Accounting
    from podserve.gateway.errors import InvalidRequest
    from podserve.gateway.keys import KeyRecord, key_id_of, new_key
    from podserve.gateway.store.sqlite import SqliteStore
    from podserve.gateway.wire import Endpoint, billable

    config = load_gateway_config(
        "prices:\n"
        "  vision: {inputPerMillionUsd: 1, outputPerMillionUsd: 1, mediaPartTokens: 576}\n"
        "  text: {inputPerMillionUsd: 1, outputPerMillionUsd: 1}\n"
    )
    store = SqliteStore(":memory:")
    accounting = Accounting(config, store)
    _, digest = new_key()
    key = KeyRecord(key_id_of(digest), digest, "t", "ns", (), None, None, None, None, False, 0.0)
    await store.create_key(key)
    image = {"type": "image_url", "image_url": {"url": "https://x/cat.png"}}
    content = [{"type": "text", "text": "what is it?"}, image, image]

    def chat(model: str, parts: list[object]) -> dict[str, object]:
        message = {"role": "user", "content": parts}
        return {"model": model, "messages": [message], "max_tokens": 1}

    with_images = billable(chat("vision", content), Endpoint.CHAT)
    text_only = billable(chat("vision", content[:1]), Endpoint.CHAT)
    assert with_images.media_parts == 2
    held = (await accounting.admit(key, with_images)).prompt_tokens
    # and a token for each of the 2 joins between parts (vLLM joins them with "\n")
    assert held == (await accounting.admit(key, text_only)).prompt_tokens + 2 * 576 + 2
    with pytest.raises(InvalidRequest, match="mediaPartTokens"):
        await accounting.admit(key, billable(chat("text", content), Endpoint.CHAT))
