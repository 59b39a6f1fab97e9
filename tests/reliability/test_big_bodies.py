"""Lists of valid items, too many or too long for any request to need. A chat of 100,000
valid messages (3 MB) cost 0.4 s of the pod's event loop on an idle core, and 0.5-5 s of
`/healthz` silence on a busy one, before it was refused for its characters; the generate
extension took 100,000 stop strings and looked for each after every token.

Structural, not timed. Past its limit, a list is refused on its length before any item is
validated: one `over_limit` error, at the field's own location, whatever the list holds.
End to end, a real pod answers each with a 400 naming the field and the limit (OpenAI's
error object on `/v1`, `{"error": ...}` on the generate extension) and keeps answering
`/healthz`; at the limits themselves it serves the request.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from podserve.protocol.openai.completions import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    ChatRequest,
    CompletionRequest,
)
from podserve.protocol.sampling import MAX_STOP_CHARS, MAX_STOP_SEQUENCES
from podserve.protocol.v2.generate import GenerateRequest
from tests.support.server import ServerProcess, post_then_live, wait_until

HUGE = 100_000
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "models"
MESSAGE = {"role": "user", "content": "x"}
PART = {"type": "text", "text": "x"}


def chat(messages: list[Any]) -> dict[str, Any]:
    return {"model": "tiny-lm", "messages": messages, "max_tokens": 1}


def generate(stop: str | list[str]) -> dict[str, Any]:
    return {"text_input": "x", "parameters": {"stop": stop, "max_tokens": 1}}


# (schema, body, where the error sits, its message)
OVER_LIMIT: list[tuple[str, type[BaseModel], dict[str, Any], tuple[str, ...], str]] = [
    (
        "messages",
        ChatRequest,
        chat([MESSAGE] * HUGE),
        ("messages",),
        f"{HUGE} messages; at most {MAX_MESSAGES}",
    ),
    (
        "content-parts",
        ChatRequest,
        chat([{"role": "user", "content": [PART] * HUGE}]),
        ("messages",),
        f"{HUGE} content parts in all messages; at most {MAX_CONTENT_PARTS}",
    ),
    (
        "stop",
        CompletionRequest,
        {"model": "m", "prompt": "x", "stop": ["x"] * HUGE},
        ("stop",),
        f"{HUGE} stop sequences; at most 4",
    ),
    (
        "stop-chars",
        CompletionRequest,
        {"model": "m", "prompt": "x", "stop": "x" * HUGE},
        ("stop",),
        f"{HUGE} characters in a stop sequence; at most 1024",
    ),
    (
        "generate-stop",
        GenerateRequest,
        generate(["x"] * HUGE),
        ("parameters", "stop"),
        f"{HUGE} stop sequences; at most 4",
    ),
    (
        "generate-stop-chars",
        GenerateRequest,
        generate(["x", "x" * HUGE]),
        ("parameters", "stop"),
        f"{HUGE} characters in a stop sequence; at most 1024",
    ),
]


@pytest.mark.parametrize(
    ("schema", "body", "loc", "message"),
    [case[1:] for case in OVER_LIMIT],
    ids=[case[0] for case in OVER_LIMIT],
)
def test_a_list_past_its_limit_is_one_error_before_any_item_is_validated(
    schema: type[BaseModel], body: dict[str, Any], loc: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        schema.model_validate(body)
    # type, place and message only: `input` would print the whole list
    found = [(e["type"], e["loc"], e["msg"]) for e in refused.value.errors(include_url=False)]
    assert found == [("over_limit", loc, message)]


def _refusal(schema: type[BaseModel], body: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as refused:
        schema.model_validate(body)
    return str(refused.value.errors(include_url=False)[0]["msg"])


def test_the_limits_are_inclusive() -> None:
    ChatRequest.model_validate(chat([MESSAGE] * MAX_MESSAGES))
    assert _refusal(ChatRequest, chat([MESSAGE] * (MAX_MESSAGES + 1))).endswith(
        f"messages; at most {MAX_MESSAGES}"
    )
    two = [{"role": "user", "content": [PART] * (MAX_CONTENT_PARTS // 2)}] * 2
    ChatRequest.model_validate(chat(two))
    assert _refusal(ChatRequest, chat([*two, {**MESSAGE, "content": [PART]}])).endswith(
        f"content parts in all messages; at most {MAX_CONTENT_PARTS}"
    )
    longest = "x" * MAX_STOP_CHARS
    GenerateRequest.model_validate(generate([longest] * MAX_STOP_SEQUENCES))
    assert _refusal(GenerateRequest, generate([longest] * (MAX_STOP_SEQUENCES + 1))).endswith(
        f"stop sequences; at most {MAX_STOP_SEQUENCES}"
    )
    assert _refusal(GenerateRequest, generate(longest + "x")).endswith(
        f"characters in a stop sequence; at most {MAX_STOP_CHARS}"
    )


# --- end to end, on a real pod --------------------------------------------------------


@pytest.fixture(scope="module")
def pod() -> Iterator[ServerProcess]:
    with ServerProcess(
        "--model", f"tiny-lm={EXAMPLES / 'tiny-lm'}", env={"HF_HUB_OFFLINE": "1"}
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield server


@pytest.mark.slow
def test_a_chat_of_100k_messages_gets_a_400_naming_messages_and_the_limit(
    pod: ServerProcess,
) -> None:
    response = post_then_live(pod, "/v1/chat/completions", chat([MESSAGE] * HUGE))
    assert response.status_code == 400, response.text[:300]
    assert response.json() == {
        "error": {
            "message": f"'messages': {HUGE} messages; at most {MAX_MESSAGES}",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_input",
        }
    }


@pytest.mark.slow
@pytest.mark.parametrize("route", ["generate", "generate_stream"])
@pytest.mark.parametrize(
    ("stop", "message"),
    [
        (["x"] * 5, "'parameters.stop': 5 stop sequences; at most 4"),
        (["x"] * HUGE, f"'parameters.stop': {HUGE} stop sequences; at most 4"),
        (
            "x" * (MAX_STOP_CHARS + 1),
            f"'parameters.stop': {MAX_STOP_CHARS + 1} characters in a stop sequence; "
            f"at most {MAX_STOP_CHARS}",
        ),
    ],
    ids=["five", "huge", "long"],
)
def test_the_generate_extension_bounds_its_stop_strings(
    pod: ServerProcess, route: str, stop: str | list[str], message: str
) -> None:
    response = post_then_live(pod, f"/v2/models/tiny-lm/{route}", generate(stop))
    assert response.status_code == 400, response.text[:300]
    assert response.json() == {"error": message}


@pytest.mark.slow
def test_the_generate_extension_serves_stop_strings_up_to_the_limits(pod: ServerProcess) -> None:
    stops = ["\n" * MAX_STOP_CHARS, "zq", "qz", "zz"]
    response = post_then_live(pod, "/v2/models/tiny-lm/generate", generate(stops))
    assert response.status_code == 200, response.text[:300]
    response = post_then_live(pod, "/v2/models/tiny-lm/generate", generate([*stops, "qq"]))
    assert response.status_code == 400, response.text[:300]


@pytest.mark.slow
def test_openai_completions_name_stop_in_the_same_words(pod: ServerProcess) -> None:
    body = {"model": "tiny-lm", "prompt": "x", "max_tokens": 1, "stop": ["x"] * 5}
    response = post_then_live(pod, "/v1/completions", body)
    assert response.status_code == 400, response.text[:300]
    assert response.json()["error"]["message"] == "'stop': 5 stop sequences; at most 4"
