"""What a stream or a response is charged when its output is not plain `content`, or its
usage does not count what it generated.

- A cancelled chat stream is charged the tokens relayed: a delta of tool-call arguments,
  of reasoning (`reasoning_content`, `reasoning`), of a refusal is generated output as
  much as `content` (it was charged 0).
- A completion or chat usage without a valid `completion_tokens` is no usage: the whole
  reservation is charged, as for a response without one (it was taken for 0 generated
  tokens). Embeddings keep their rule: OpenAI reports them without the key.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from podserve.gateway.budget import Usage
from podserve.gateway.sse import EventRelay
from podserve.gateway.usage import billed_usage, reported_usage, usage_of
from tests.gateway.support import GatewayProcess, make_key, spend_by, wait_for_ledger_rows
from tests.gateway.test_hold_shapes import VllmLike, gateway_config


def _events(*payloads: object) -> bytes:
    return b"".join(b"data: " + orjson.dumps(p) + b"\n\n" for p in payloads)


def _sent(*deltas: dict[str, Any]) -> int:
    relay = EventRelay(keep_usage_chunk=False)
    relay.feed(_events(*({"choices": [{"index": 0, "delta": d}]} for d in deltas)))
    return relay.tally.tokens_sent


# --- unit: which chunks carry a token ---------------------------------------------------
@pytest.mark.parametrize(
    "delta",
    [
        {"content": "x"},
        {"content": ""},  # a partial UTF-8 character, a special token
        {"reasoning_content": "x"},
        {"reasoning": "x"},
        {"refusal": "x"},
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"a'}}]},
        {"tool_calls": [{"index": 0, "id": "c1", "type": "function", "function": {"name": "f"}}]},
        {"function_call": {"arguments": "x"}},
        {"role": "assistant", "content": "Hi"},  # an opener that carries the first token
    ],
)
def test_a_delta_of_generated_output_counts_a_token(delta: dict[str, Any]) -> None:
    assert _sent(delta) == 1


@pytest.mark.parametrize(
    "delta",
    [
        {"role": "assistant"},
        {"role": "assistant", "content": ""},  # vLLM's opener
        {"role": "assistant", "content": "", "refusal": None},  # OpenAI's
        {},  # the finishing chunk
        {"content": None},
        {"tool_calls": []},
    ],
)
def test_a_delta_without_output_counts_none(delta: dict[str, Any]) -> None:
    assert _sent(delta) == 0


def test_each_choice_of_a_chunk_counts() -> None:
    relay = EventRelay(keep_usage_chunk=False)
    chunk = {
        "choices": [
            {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "1"}}]}},
            {"index": 1, "delta": {"reasoning": "hm"}},
            {"index": 2, "delta": {"content": "a"}},
        ]
    }
    relay.feed(_events(chunk, chunk))
    assert relay.tally.tokens_sent == 6


# --- unit: a usage that does not count what was generated -------------------------------
@pytest.mark.parametrize(
    "usage",
    [
        {"prompt_tokens": 4},
        {"prompt_tokens": 4, "completion_tokens": None},
        {"prompt_tokens": 4, "completion_tokens": "7"},
        {"prompt_tokens": 4, "completion_tokens": -1},
        {"prompt_tokens": 4, "completion_tokens": 1.5},
    ],
)
def test_a_generating_usage_without_completion_tokens_is_no_usage(usage: object) -> None:
    assert usage_of(usage, generates=True) is None
    body = orjson.dumps({"choices": [], "usage": usage})
    assert billed_usage(body, 5, 16, 3) == Usage(5, 48)  # the whole reservation
    relay = EventRelay(keep_usage_chunk=False)
    relay.feed(_events({"choices": [{"index": 0, "text": "a"}]}, {"choices": [], "usage": usage}))
    assert relay.tally.usage is None  # a stream without usage: its hold, or what was sent


def test_embeddings_still_report_without_completion_tokens() -> None:
    for usage in ({"prompt_tokens": 4}, {"prompt_tokens": 4, "completion_tokens": None}):
        body = orjson.dumps({"data": [], "usage": usage})
        assert usage_of(usage, generates=False) == Usage(4, 0)
        assert reported_usage(body) == Usage(4, 0)
        assert billed_usage(body, 4, None, 1) == Usage(4, 0)  # no output cap: embeddings


def test_a_complete_generating_usage_is_taken() -> None:
    usage = {"prompt_tokens": 4, "completion_tokens": 9}
    assert usage_of(usage, generates=True) == Usage(4, 9)
    assert billed_usage(orjson.dumps({"usage": usage}), 5, 16, 3) == Usage(4, 9)


# --- end to end: a gateway in front of the vLLM-like upstream ---------------------------
@pytest.fixture(scope="module")
def upstream() -> Iterator[VllmLike]:
    pytest.importorskip("tokenizers")
    with VllmLike() as server:
        yield server


@pytest.fixture(scope="module")
def gateway(upstream: VllmLike, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    work: Path = tmp_path_factory.mktemp("charge-shapes")
    with GatewayProcess(gateway_config(upstream), work) as process:
        yield process


@pytest.mark.parametrize("model", ["toolcalls", "reasoning"])
def test_a_cancelled_stream_is_charged_its_tool_call_or_reasoning_deltas(
    gateway: Any, model: str
) -> None:
    """The upstream sends its opener and 30 deltas, then waits; the client reads them all
    and goes. The 30 relayed were charged 0 output tokens."""
    key, key_id = make_key(gateway.config_path, budget_micro=100_000)
    body = {
        "model": model,
        "stream": True,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": "hi"}],
    }
    events = 0
    with (
        httpx.Client(base_url=gateway.url, timeout=60) as client,
        client.stream(
            "POST", "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
        ) as reply,
    ):
        assert reply.status_code == 200
        for line in reply.iter_lines():
            events += line.startswith("data:")
            if events == 1 + VllmLike.STALL_AFTER:
                break
    wait_for_ledger_rows(gateway.config_path, key_id, 1, "the cancelled stream's settlement")
    row = spend_by(gateway.config_path, "key")[key_id]
    assert row.completion_tokens == VllmLike.STALL_AFTER


@pytest.mark.parametrize("stream", [False, True])
def test_a_usage_of_prompt_tokens_alone_is_charged_the_hold(gateway: Any, stream: bool) -> None:
    """The upstream generated 50 tokens and reported only `prompt_tokens`: billed 0
    output tokens, before; now the reservation (prompt and the whole output cap)."""
    key, key_id = make_key(gateway.config_path, budget_micro=100_000)
    body = {
        "model": "partialusage",
        "stream": stream,
        "max_tokens": 50,
        "messages": [{"role": "user", "content": "hi"}],
    }
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        reply = client.post(
            "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
        )
    assert reply.status_code == 200, reply.text
    wait_for_ledger_rows(gateway.config_path, key_id, 1, "the settlement")
    assert spend_by(gateway.config_path, "key")[key_id].completion_tokens == 50
