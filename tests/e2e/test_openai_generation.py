"""/v1/completions and /v1/chat/completions on the bundled tiny LM, against the real
server, with the openai SDK as the client (sync and async, streaming and not)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types import Completion, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam, ChatCompletionTokenLogprob

from tests.support.server import ServerProcess, openai_client, serving_models, wait_until

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]


def usage(result: Completion | ChatCompletion) -> CompletionUsage:
    """The usage podserve always reports (the SDK types it optional)."""
    assert result.usage is not None
    return result.usage


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    lazy = tmp_path_factory.mktemp("lazy") / "lazy"
    lazy.mkdir()
    (lazy / "model.yaml").write_text("runtime: transformers\npreload: false\n")
    with serving_models(
        {
            "tiny": ROOT / "examples/models/tiny-lm",
            "iris": ROOT / "examples/models/iris",
            "lazy": lazy,
        }
    ) as process:
        yield process


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai_client(server)


def test_completion_returns_text_usage_and_finish_reason(client: openai.OpenAI) -> None:
    result = client.completions.create(
        model="tiny",
        prompt="The function returns",
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    choice = result.choices[0]
    assert choice.finish_reason == "length"
    assert len(choice.text) > 0
    assert usage(result).completion_tokens == 12
    assert usage(result).prompt_tokens > 0
    assert usage(result).total_tokens == usage(result).prompt_tokens + 12
    # Greedy decoding is deterministic.
    again = client.completions.create(
        model="tiny",
        prompt="The function returns",
        max_tokens=12,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    assert again.choices[0].text == choice.text


def test_chat_streaming_and_not_agree(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What does json.dumps do?"}
    ]
    whole = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=20, temperature=0
    )
    stream = client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [
        c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason
    ]
    assert whole.choices[0].message.role == "assistant"
    assert text == whole.choices[0].message.content
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == usage(whole).completion_tokens


def test_stop_strings_cut_the_text(client: openai.OpenAI) -> None:
    full = client.completions.create(
        model="tiny",
        prompt="The function returns",
        max_tokens=30,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    text = full.choices[0].text
    stop = text.strip().split(" ")[1]
    cut = client.completions.create(
        model="tiny",
        prompt="The function returns",
        max_tokens=30,
        temperature=0,
        stop=[stop],
        extra_body={"ignore_eos": True},
    )
    assert cut.choices[0].finish_reason == "stop"
    assert stop not in cut.choices[0].text
    assert text.startswith(cut.choices[0].text)


def test_n_choices_are_independent_sequences(client: openai.OpenAI) -> None:
    result = client.completions.create(
        model="tiny",
        prompt="The function returns",
        max_tokens=10,
        temperature=1.0,
        seed=11,
        n=3,
        extra_body={"ignore_eos": True},
    )
    assert [c.index for c in result.choices] == [0, 1, 2]
    assert all(c.finish_reason == "length" for c in result.choices)
    assert usage(result).completion_tokens == 30  # the prompt counts once
    assert len({c.text for c in result.choices}) > 1  # seeds 11, 12, 13 differ
    again = client.completions.create(
        model="tiny",
        prompt="The function returns",
        max_tokens=10,
        temperature=1.0,
        seed=11,
        n=3,
        extra_body={"ignore_eos": True},
    )
    assert [c.text for c in again.choices] == [c.text for c in result.choices]
    greedy = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "What does json.dumps do?"}],
        max_tokens=8,
        temperature=0,
        n=2,
    )
    first, second = greedy.choices
    assert first.message.content == second.message.content  # greedy: the same text


def test_n_choices_stream_interleaved_with_their_index(client: openai.OpenAI) -> None:
    texts: dict[int, str] = {0: "", 1: ""}
    finishes: dict[int, str | None] = {}
    usage = None
    for chunk in client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "What does json.dumps do?"}],
        max_tokens=12,
        temperature=0.8,
        seed=5,
        n=2,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    ):
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
            if choice.finish_reason is not None:
                finishes[choice.index] = choice.finish_reason
    assert finishes == {0: "length", 1: "length"}
    assert usage is not None
    assert usage.completion_tokens == 24
    whole = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "What does json.dumps do?"}],
        max_tokens=12,
        temperature=0.8,
        seed=5,
        n=2,
        extra_body={"ignore_eos": True},
    )
    assert [c.message.content for c in whole.choices] == [texts[0], texts[1]]


def test_completion_logprobs_name_each_token_and_its_alternatives(
    client: openai.OpenAI,
) -> None:
    result = client.completions.create(
        model="tiny",
        prompt="The function returns",
        max_tokens=8,
        temperature=0,
        logprobs=3,
        extra_body={"ignore_eos": True},
    )
    logprobs = result.choices[0].logprobs
    assert logprobs is not None
    tokens, token_logprobs, top_logprobs = (
        logprobs.tokens,
        logprobs.token_logprobs,
        logprobs.top_logprobs,
    )
    assert tokens is not None
    assert token_logprobs is not None
    assert top_logprobs is not None
    assert len(tokens) == len(token_logprobs) == 8
    # tokens are named as decoded one by one, special tokens included (the text skips them)
    assert re.sub(r"<\|\w+\|>", "", "".join(tokens)) == result.choices[0].text
    assert logprobs.text_offset == [sum(len(t) for t in tokens[:i]) for i in range(len(tokens))]
    for token, logprob, top in zip(tokens, token_logprobs, top_logprobs, strict=True):
        assert logprob <= 0
        assert 1 <= len(top) <= 3  # tokens that decode alike share a key
        # greedy: the chosen token is the likeliest one
        assert logprob == pytest.approx(max(top.values()), abs=1e-5)
        assert top[token] == pytest.approx(logprob, abs=1e-5)
    plain = client.completions.create(
        model="tiny", prompt="The function returns", max_tokens=8, temperature=0, logprobs=0
    )
    plain_logprobs = plain.choices[0].logprobs
    assert plain_logprobs is not None
    assert plain_logprobs.top_logprobs is None
    assert plain_logprobs.token_logprobs is not None
    assert len(plain_logprobs.token_logprobs) == usage(plain).completion_tokens


def test_chat_logprobs_stream_one_item_per_token(client: openai.OpenAI) -> None:
    messages: list[ChatCompletionMessageParam] = [
        {"role": "user", "content": "What does json.dumps do?"}
    ]
    whole = client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=10,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    whole_logprobs = whole.choices[0].logprobs
    assert whole_logprobs is not None
    content = whole_logprobs.content
    assert content is not None
    assert len(content) == usage(whole).completion_tokens
    for item in content:
        assert item.bytes is not None
        assert bytes(item.bytes).decode() == item.token
        assert len(item.top_logprobs) == 2
        assert item.top_logprobs[0].logprob >= item.top_logprobs[1].logprob
        assert item.logprob == pytest.approx(item.top_logprobs[0].logprob, abs=1e-5)
    streamed: list[ChatCompletionTokenLogprob] = []
    for chunk in client.chat.completions.create(
        model="tiny",
        messages=messages,
        max_tokens=10,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
        stream=True,
    ):
        if chunk.choices and chunk.choices[0].logprobs is not None:
            streamed += chunk.choices[0].logprobs.content or []
    assert [(i.token, round(i.logprob, 4)) for i in streamed] == [
        (i.token, round(i.logprob, 4)) for i in content
    ]
    without = client.chat.completions.create(
        model="tiny", messages=messages, max_tokens=4, temperature=0
    )
    assert without.choices[0].logprobs is None
    with pytest.raises(openai.BadRequestError, match="'top_logprobs' requires 'logprobs': true"):
        client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=4, top_logprobs=2
        )
    with pytest.raises(openai.BadRequestError, match="top_logprobs"):
        client.chat.completions.create(
            model="tiny", messages=messages, max_tokens=4, logprobs=True, top_logprobs=21
        )


async def test_async_streams_run_concurrently(server: ServerProcess) -> None:
    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)

    async def one(i: int) -> int:
        stream = await client.completions.create(
            model="tiny",
            prompt=f"Return the value {i}",
            max_tokens=16,
            temperature=0.8,
            seed=i,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        usage = None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
        assert usage is not None
        return usage.completion_tokens

    counts = await asyncio.gather(*(one(i) for i in range(8)))
    await client.close()
    assert counts == [16] * 8
    assert server.metric("podserve_time_to_first_token_seconds_count", {"model": "tiny"}) >= 8
    assert server.metric("podserve_generation_tokens_total", {"model": "tiny"}) >= 128
    assert server.metric("podserve_request_queue_time_seconds_count", {"model": "tiny"}) >= 8


def test_errors_follow_openai_shapes(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="exceeds the model's context of 512"):
        client.completions.create(model="tiny", prompt="word " * 300, max_tokens=256)
    with pytest.raises(openai.BadRequestError, match="exceeds this model's limit of 256"):
        client.completions.create(model="tiny", prompt="Hi", max_tokens=300)
    with pytest.raises(openai.NotFoundError, match="unknown model: 'nope'"):
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError, match="not a generative model"):
        client.completions.create(model="iris", prompt="x")
    with pytest.raises(openai.InternalServerError) as unavailable:
        client.completions.create(model="lazy", prompt="x")
    assert unavailable.value.status_code == 503
    assert "retry-after" in unavailable.value.response.headers
    with pytest.raises(openai.BadRequestError, match="'n': Input should be less than or equal"):
        client.completions.create(model="tiny", prompt="x", n=17)


def test_a_client_that_leaves_mid_stream_frees_its_sequence(server: ServerProcess) -> None:
    body = {
        "model": "tiny",
        "prompt": "Return",
        "max_tokens": 250,
        "stream": True,
        "ignore_eos": True,
        "temperature": 0,
    }
    with (
        httpx.Client(base_url=server.url, timeout=30) as http,
        http.stream("POST", "/v1/completions", json=body) as response,
    ):
        assert response.headers["content-type"] == "text/event-stream"
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert '"text_completion"' in first
        assert server.metric("podserve_num_requests_running", {"model": "tiny"}) == 1
    # The connection is closed: the engine aborts the sequence within a step.
    wait_until(
        lambda: server.metric("podserve_num_requests_running", {"model": "tiny"}) == 0,
        timeout_s=10,
        what="the aborted stream to leave the running batch",
    )
    assert server.metric("vllm:num_requests_running", {"model_name": "tiny"}) == 0
    assert server.metric("podserve_kv_cache_usage_ratio", {"model": "tiny"}) == 0


def test_server_wide_generation_limits_from_the_environment() -> None:
    # podserve render sets these from the ModelService spec's serving limits.
    with ServerProcess(
        "--model",
        f"tiny={ROOT / 'examples/models/tiny-lm'}",
        env={
            "HF_HUB_OFFLINE": "1",
            "PODSERVE_MAX_CONTEXT_TOKENS": "128",
            "PODSERVE_MAX_CONCURRENT_SEQUENCES": "4",
        },
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=120, what="ready")
        client = openai.OpenAI(base_url=f"{process.url}/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError, match="exceeds the model's context of 128"):
            client.completions.create(model="tiny", prompt="word " * 100, max_tokens=64)
        ok = client.completions.create(
            model="tiny",
            prompt="Return",
            max_tokens=4,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        assert usage(ok).completion_tokens == 4


def test_triton_generate_extension(server: ServerProcess, client: openai.OpenAI) -> None:
    body = {
        "text_input": "The function returns",
        # end_id: another backend's knob, ignored rather than refused
        "parameters": {"max_tokens": 8, "temperature": 0, "ignore_eos": True, "end_id": 2},
    }
    with httpx.Client(base_url=server.url, timeout=30) as http:
        whole = http.post("/v2/models/tiny/generate", json=body)
        assert whole.status_code == 200, whole.text
        answer = whole.json()
        assert answer["model_name"] == "tiny"
        assert answer["finish_reason"] == "length"
        same = client.completions.create(
            model="tiny",
            prompt="The function returns",
            max_tokens=8,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        assert answer["text_output"] == same.choices[0].text
        with http.stream("POST", "/v2/models/tiny/generate_stream", json=body) as streamed:
            assert streamed.status_code == 200
            assert streamed.headers["content-type"].startswith("text/event-stream")
            events = [
                json.loads(line[len("data: ") :])
                for line in streamed.iter_lines()
                if line.startswith("data: ")
            ]
        assert "".join(e["text_output"] for e in events) == answer["text_output"]
        assert events[-1]["finish_reason"] == "length"
        assert all(e["finish_reason"] is None for e in events[:-1])
        missing = http.post("/v2/models/tiny/generate", json={"parameters": {}})
        assert missing.status_code == 400
        assert "'text_input'" in missing.json()["error"]
        unknown = http.post("/v2/models/nope/generate", json=body)
        assert unknown.status_code == 404
        wrong = http.post("/v2/models/iris/generate", json=body)
        assert wrong.status_code == 400
        assert "not a generative model" in wrong.json()["error"]
