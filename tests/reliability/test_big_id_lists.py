"""Lists of millions of items where a request expects text or a handful. A probe's
`/v1/completions` prompt of 1,000,000 token ids took 4.4 s to refuse (58 s for a 16 MiB
body), `/healthz` silent meanwhile: pydantic checked every id against `str`, and
`parse_body` built one error dict per id to name the first, all on the event loop.

Structural, not timed. A token-id prompt or embeddings input is refused on the list's
first item, before pydantic validates any: InvalidInput comes straight out of
`model_validate`, not a ValidationError over the items. Every other list field stops at
its first bad item: the error count is the same for 10 items as for as many as the field
takes (a million are refused on their count, tests/reliability/test_big_bodies.py). End to
end, a real pod answers each with a 400 naming the field (OpenAI's error object on `/v1`,
its `code` a string) and keeps answering `/healthz`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel, ValidationError

from podserve.core.errors import InvalidInput
from podserve.protocol.openai.completions import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    ChatRequest,
    CompletionRequest,
)
from podserve.protocol.openai.embeddings import EmbeddingRequest
from tests.support.server import ServerProcess, post_then_live, wait_until

MILLION = 1_000_000
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"

Body = Callable[[int], dict[str, Any]]

# Refused on the first item and the length alone: (schema, body of n items, message).
REFUSED_UNREAD: list[tuple[str, type[BaseModel], Body, str]] = [
    (
        "prompt-ids",
        CompletionRequest,
        lambda n: {"model": "m", "prompt": [1] * n},
        "'prompt' as token ids is not supported",
    ),
    (
        "prompt-id-lists",
        CompletionRequest,
        lambda n: {"model": "m", "prompt": [[1] * n]},
        "'prompt' as token ids is not supported",
    ),
    (
        "prompt-strings",
        CompletionRequest,
        lambda n: {"model": "m", "prompt": ["a"] * n},
        "'prompt' as a list must hold exactly one string",
    ),
    (
        "input-ids",
        EmbeddingRequest,
        lambda n: {"model": "m", "input": [1] * n},
        "'input' as token ids is not supported",
    ),
    (
        "input-floats",
        EmbeddingRequest,
        lambda n: {"model": "m", "input": [1.5] * n},
        f"'input' has {MILLION} items; at most 2048",
    ),
]

# Validated, stopping at the first bad item: (schema, body of n bad items, the most items
# the field takes). Stop strings are at most 4: their count is checked first.
FAIL_FAST: list[tuple[str, type[BaseModel], Body, int]] = [
    ("messages", ChatRequest, lambda n: {"model": "m", "messages": [1] * n}, MAX_MESSAGES),
    (
        "content",
        ChatRequest,
        lambda n: {"model": "m", "messages": [{"role": "user", "content": [1] * n}]},
        MAX_CONTENT_PARTS,
    ),
]


@pytest.mark.parametrize(
    ("schema", "body", "message"),
    [case[1:] for case in REFUSED_UNREAD],
    ids=[case[0] for case in REFUSED_UNREAD],
)
def test_a_list_of_the_wrong_shape_or_length_is_refused_before_its_items_are_validated(
    schema: type[BaseModel], body: Body, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:  # not a ValidationError: no item was read
        schema.model_validate(body(MILLION))
    assert message in refused.value.message


@pytest.mark.parametrize(
    ("schema", "body", "most"),
    [case[1:] for case in FAIL_FAST],
    ids=[case[0] for case in FAIL_FAST],
)
def test_a_list_of_bad_items_costs_one_error_whatever_its_length(
    schema: type[BaseModel], body: Body, most: int
) -> None:
    counts = []
    for n in (10, most):
        with pytest.raises(ValidationError) as refused:
            schema.model_validate(body(n))
        counts.append(refused.value.error_count())
    assert counts[0] == counts[1] <= 3, counts


# --- end to end, on a real pod --------------------------------------------------------


@pytest.fixture(scope="module")
def pod() -> Iterator[ServerProcess]:
    with ServerProcess(
        "--model",
        f"tiny-lm={EXAMPLES / 'tiny-lm'}",
        "--model",
        f"minilm={EXAMPLES / 'minilm'}",
        env={"HF_HUB_OFFLINE": "1"},
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield server


def _openai_error(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 400, response.text[:300]
    error: dict[str, Any] = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] is None
    assert error["code"] == "invalid_input"  # OpenAI's `code` is a string or null
    return error


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, MILLION])
def test_a_token_id_prompt_is_refused_whatever_its_length(pod: ServerProcess, n: int) -> None:
    for prompt in ([1] * n, [[1] * n]):
        body = {"model": "tiny-lm", "prompt": prompt, "max_tokens": 1}
        error = _openai_error(post_then_live(pod, "/v1/completions", body))
        assert error["message"].startswith("'prompt' as token ids is not supported"), error
    error = _openai_error(
        post_then_live(pod, "/v1/embeddings", {"model": "minilm", "input": [1] * n})
    )
    assert error["message"].startswith("'input' as token ids is not supported"), error


@pytest.mark.slow
@pytest.mark.parametrize(
    ("route", "body", "names"),
    [
        ("/v1/completions", {"model": "tiny-lm", "prompt": "x", "stop": [1] * MILLION}, "'stop"),
        ("/v1/chat/completions", {"model": "tiny-lm", "messages": [1] * MILLION}, "'messages'"),
        (
            "/v1/chat/completions",
            {"model": "tiny-lm", "messages": [{"role": "user", "content": [1] * MILLION}]},
            "'messages': 1000000 content parts",
        ),
        ("/v1/embeddings", {"model": "minilm", "input": ["x"] * MILLION}, "'input' has"),
    ],
    ids=["stop", "messages", "content", "input"],
)
def test_a_million_bad_items_get_a_400_naming_the_field(
    pod: ServerProcess, route: str, body: dict[str, Any], names: str
) -> None:
    error = _openai_error(post_then_live(pod, route, body))
    assert error["message"].startswith(names), error


@pytest.mark.slow
def test_the_generate_extension_names_the_field_in_its_own_shape(pod: ServerProcess) -> None:
    body = {"text_input": "x", "parameters": {"stop": [1] * MILLION}}
    response = post_then_live(pod, "/v2/models/tiny-lm/generate", body)
    assert response.status_code == 400
    assert response.json()["error"].startswith("'parameters.stop"), response.text[:300]


@pytest.mark.slow
def test_other_openai_errors_carry_a_string_code(pod: ServerProcess) -> None:
    body = {"model": "nope", "prompt": "x"}
    response = post_then_live(pod, "/v1/completions", body)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
