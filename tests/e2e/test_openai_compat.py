"""Where /v1/completions and /v1/chat/completions meet OpenAI's API at its edges, against
the real server with the openai SDK (and httpx for what the SDK will not send): seeds at
the top of their range, stop strings that never complete, temperatures and top_p near 0,
the max_tokens defaults, parameters implemented or refused by name (never ignored), JSON
null as the default, and the error objects of paths and methods /v1 does not serve."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types import Completion, CompletionUsage
from openai.types.chat import ChatCompletion, ChatCompletionMessageParam

from tests.support.server import ServerProcess, openai_client, serving_models, write_model

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "examples/models/tiny-lm"
CONTEXT = 512  # tiny-lm's context (examples/models/tiny-lm/config.json)
CAP = 256  # its max_tokens_cap (model.yaml)
PROMPT = "The function returns"
MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": PROMPT}]

# An "embedding" model whose embedding output is 1-D: the route indexes its second axis
# and raises an error of no known kind, the server's catch-all 500.
SHAPELESS = """
import numpy as np
from podserve.runtimes import ModelAPI

class Shapeless(ModelAPI):
    def predict(self, batch):
        rows = len(batch["text"])
        return {"embedding": np.ones(rows, np.float32), "tokens": np.ones(rows, np.int64)}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("models")
    shapeless = write_model(
        root,
        "shapeless",
        runtime="custom",
        model_class="shapeless:Shapeless",
        inputs=[{"name": "text", "datatype": "BYTES", "shape": [-1]}],
        outputs=[
            {"name": "embedding", "datatype": "FP32", "shape": [-1]},
            {"name": "tokens", "datatype": "INT64", "shape": [-1]},
        ],
    )
    (shapeless / "shapeless.py").write_text(SHAPELESS)
    with serving_models({"tiny": TINY, "shapeless": shapeless}) as process:
        yield process


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai_client(server)


@pytest.fixture
def http(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


def usage(result: Completion | ChatCompletion) -> CompletionUsage:
    assert result.usage is not None
    return result.usage


def words(tokens: int) -> str:
    """Text of about `tokens` tokens of tiny-lm's tokenizer."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY, local_files_only=True)
    return str(tokenizer.decode(tokenizer.encode("word " * (tokens + 50))[:tokens]))


# --- seeds ------------------------------------------------------------------------------
def test_a_seed_at_the_top_of_its_range_seeds_every_choice(client: openai.OpenAI) -> None:
    top = 2**64 - 1  # choice 1's seed + 1 overflowed torch's manual_seed: a 500
    both = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=6, temperature=1.0, n=2, seed=top
    )
    assert [c.index for c in both.choices] == [0, 1]
    alone = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=6, temperature=1.0, n=1, seed=top
    )
    assert both.choices[0].text == alone.choices[0].text  # choice 0 keeps the seed
    chat = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=4, n=3, seed=top - 1
    )
    assert len(chat.choices) == 3


def test_an_unhandled_error_on_v1_is_openais_error_object(
    client: openai.OpenAI, server: ServerProcess
) -> None:
    with pytest.raises(openai.InternalServerError) as failed:
        client.embeddings.create(model="shapeless", input=["a"], dimensions=1)
    assert failed.value.status_code == 500
    assert failed.value.body == {
        "message": "internal server error; see the server log",
        "type": "server_error",
        "param": None,
        "code": "internal_error",
    }
    # the log has the traceback
    server.wait_log(lambda r: str(r.get("msg")).startswith("unhandled error\nTraceback"))


# --- text held for a stop string --------------------------------------------------------
def test_text_held_for_a_stop_string_that_never_completes_is_kept(client: openai.OpenAI) -> None:
    whole = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=40, temperature=0)
    text = whole.choices[0].text
    assert whole.choices[0].finish_reason == "stop"  # the model's EOS
    assert text
    # A stop that starts with the text's last character: that character is held back as
    # its possible start until the EOS, which used to drop it.
    stop = text[-1] + "QQQ"
    held = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop]
    )
    assert held.choices[0].text == text
    streamed = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop], stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == text
    chat = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=60, temperature=0
    )
    content = chat.choices[0].message.content
    assert content
    assert chat.choices[0].finish_reason == "stop"
    chat_stop = [content[-1] + "QQQ"]
    held_chat = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=60, temperature=0, stop=chat_stop
    )
    assert held_chat.choices[0].message.content == content
    chunks = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=60, temperature=0, stop=chat_stop, stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == content


# --- temperature and top_p near 0 -------------------------------------------------------
def test_a_tiny_temperature_or_top_p_samples_the_greedy_text(client: openai.OpenAI) -> None:
    def text(**sampling: Any) -> str:
        result = client.completions.create(
            model="tiny",
            prompt=PROMPT,
            max_tokens=8,
            seed=1,
            extra_body={"ignore_eos": True},
            **sampling,
        )
        return str(result.choices[0].text)

    greedy = text(temperature=0)
    assert text(temperature=1e-38) == greedy
    assert text(temperature=1e-45) == greedy
    assert text(temperature=1.0, top_p=1e-46) == greedy


# --- max_tokens defaults ----------------------------------------------------------------
def test_chat_without_max_tokens_runs_to_the_cap_or_the_context(client: openai.OpenAI) -> None:
    short = client.chat.completions.create(
        model="tiny", messages=MESSAGES, temperature=0, extra_body={"ignore_eos": True}
    )
    assert usage(short).completion_tokens == CAP  # not 16
    assert short.choices[0].finish_reason == "length"
    long_messages: list[ChatCompletionMessageParam] = [{"role": "user", "content": words(495)}]
    long = client.chat.completions.create(
        model="tiny", messages=long_messages, temperature=0, extra_body={"ignore_eos": True}
    )
    prompt = usage(long).prompt_tokens
    assert CONTEXT - 16 < prompt < CONTEXT  # a default of 16 refused it
    assert usage(long).completion_tokens == CONTEXT - prompt
    alias = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_completion_tokens=3, extra_body={"ignore_eos": True}
    )
    assert usage(alias).completion_tokens == 3


def test_completions_default_to_16_tokens_or_what_the_context_leaves(
    client: openai.OpenAI,
) -> None:
    short = client.completions.create(
        model="tiny", prompt=PROMPT, temperature=0, extra_body={"ignore_eos": True}
    )
    assert usage(short).completion_tokens == 16  # OpenAI's documented default
    long = client.completions.create(
        model="tiny", prompt=words(505), temperature=0, extra_body={"ignore_eos": True}
    )
    prompt = usage(long).prompt_tokens
    assert CONTEXT - 16 < prompt < CONTEXT
    assert usage(long).completion_tokens == CONTEXT - prompt
    with pytest.raises(openai.BadRequestError, match="fills the model's context of 512"):
        client.completions.create(model="tiny", prompt=words(600))
    with pytest.raises(openai.BadRequestError, match=r"max_tokens \(16\) = \d+ tokens exceeds"):
        client.completions.create(model="tiny", prompt=words(505), max_tokens=16)


# --- parameters implemented, or refused by name -----------------------------------------
def test_logit_bias_changes_what_is_sampled(client: openai.OpenAI) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(TINY, local_files_only=True)
    greedy = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=1, temperature=0)
    first = greedy.choices[0].text
    (token_id,) = tokenizer.encode(first, add_special_tokens=False)  # one token: " the"
    banned = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=1, temperature=0, logit_bias={str(token_id): -100}
    )
    assert banned.choices[0].text not in ("", first)
    forced = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=3, logit_bias={"42": 100}, seed=3
    )
    assert forced.choices[0].message.content == tokenizer.decode([42, 42, 42])  # "GGG"
    with pytest.raises(openai.BadRequestError, match="token id 99999, outside the model's"):
        client.completions.create(model="tiny", prompt=PROMPT, logit_bias={"99999": 1})
    with pytest.raises(openai.BadRequestError, match="logit_bias"):
        client.completions.create(model="tiny", prompt=PROMPT, logit_bias={"1": 101})
    with pytest.raises(openai.BadRequestError, match="at most 300"):
        client.completions.create(
            model="tiny", prompt=PROMPT, logit_bias={str(i): 1 for i in range(301)}
        )


def test_echo_puts_the_prompt_before_the_text(client: openai.OpenAI) -> None:
    plain = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=6, temperature=0)
    echoed = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=6, temperature=0, echo=True
    )
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text
    assert usage(echoed) == usage(plain)
    streamed = client.completions.create(
        model="tiny", prompt=PROMPT, max_tokens=6, temperature=0, echo=True, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed) == echoed.choices[0].text
    with pytest.raises(openai.BadRequestError, match="'echo' with 'logprobs' is not supported"):
        client.completions.create(model="tiny", prompt=PROMPT, echo=True, logprobs=1)


@pytest.mark.parametrize(
    ("path", "extra", "named"),
    [
        ("/v1/completions", {"suffix": " END"}, "'suffix'"),
        ("/v1/completions", {"best_of": 3}, "'best_of'"),
        ("/v1/completions", {"best_of": 0}, "'best_of'"),
        ("/v1/chat/completions", {"response_format": {"type": "json_object"}}, "'response_format'"),
        ("/v1/chat/completions", {"tools": [{"type": "function"}]}, "'tools'"),
        ("/v1/chat/completions", {"tools": [{}], "tool_choice": "required"}, "'tools'"),
        ("/v1/chat/completions", {"functions": [{"name": "f"}]}, "'functions'"),
        ("/v1/completions", {"stream_options": {"include_usage": True}}, "'stream_options'"),
        ("/v1/chat/completions", {"stream_options": {}, "stream": False}, "'stream_options'"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
            "'content'",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": [{"type": "text"}]}]},
            "'content'",
        ),
    ],
)
def test_what_is_not_done_is_refused_by_name(
    http: httpx.Client, path: str, extra: dict[str, Any], named: str
) -> None:
    body: dict[str, Any] = {"model": "tiny", "max_tokens": 2, **extra}
    body.setdefault("prompt" if path == "/v1/completions" else "messages", _input(path))
    response = http.post(path, json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert named in error["message"]
    assert error["type"] == "invalid_request_error"


def test_what_asks_for_nothing_unsupported_is_served(client: openai.OpenAI) -> None:
    best = client.completions.create(model="tiny", prompt=PROMPT, max_tokens=2, n=2, best_of=2)
    assert len(best.choices) == 2
    chat = client.chat.completions.create(
        model="tiny",
        messages=MESSAGES,
        max_tokens=2,
        response_format={"type": "text"},
        tools=[{"type": "function", "function": {"name": "f"}}],
        tool_choice="none",
    )
    assert chat.choices[0].message.tool_calls is None


def _input(path: str) -> Any:
    return PROMPT if path == "/v1/completions" else [{"role": "user", "content": PROMPT}]


# --- null is the default ----------------------------------------------------------------
@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_null_is_the_default(http: httpx.Client, path: str) -> None:
    nulls = dict.fromkeys(
        [
            "temperature",
            "top_p",
            "n",
            "stream",
            "stop",
            "seed",
            "presence_penalty",
            "frequency_penalty",
            "logit_bias",
            "stream_options",
            "logprobs",
            "user",
        ]
    )
    body = {"model": "tiny", "max_tokens": 2, path_input(path): _input(path), **nulls}
    response = http.post(path, json=body)
    assert response.status_code == 200, response.text
    assert len(response.json()["choices"]) == 1  # n: 1
    assert response.headers["content-type"] == "application/json"  # stream: false
    missing = http.post(path, json={"model": None, path_input(path): _input(path)})
    assert missing.status_code == 400
    assert "'model'" in missing.json()["error"]["message"]


def path_input(path: str) -> str:
    return "prompt" if path == "/v1/completions" else "messages"


# --- paths and methods ------------------------------------------------------------------
def test_v1_paths_and_methods_it_does_not_serve_answer_openai_errors(http: httpx.Client) -> None:
    wrong = http.get("/v1/chat/completions")
    assert wrong.status_code == 405
    assert wrong.headers["allow"] == "POST"
    assert wrong.json() == {
        "error": {
            "message": "method GET not allowed on /v1/chat/completions; use POST",
            "type": "invalid_request_error",
            "param": None,
            "code": "method_not_allowed",
        }
    }
    unknown = http.get("/v1/responses")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "not_found"  # not a model's name
    assert unknown.json()["error"]["type"] == "not_found_error"
    # OIP keeps its own shape: the error as a string
    assert http.get("/v2/repository/index").json() == {
        "error": "method GET not allowed on /v2/repository/index; use POST"
    }
    assert http.get("/v2/nowhere").json() == {"error": "no route for GET /v2/nowhere"}
