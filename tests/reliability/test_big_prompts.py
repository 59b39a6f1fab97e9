"""Large prompts and texts (issue 15 items 1 and 2): a prompt that can never fit is refused
before tokenizing; tokenizing runs off the event loop, so probes answer while it runs;
an embeddings text is cut to what the encoder keeps before it is tokenized."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from podserve.dataplane.prompts import MAX_CHARS_PER_TOKEN
from podserve.generation.executor import ModelExecutor
from tests.support.gate import Gate, probed_while_held
from tests.support.planes import Edges

pytestmark = pytest.mark.asyncio(loop_scope="module")

TWENTY_MB = "a" * (20 * 1024 * 1024)


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch) -> Iterator[Gate]:
    state = Gate()
    encode_prompt = ModelExecutor.encode_prompt
    encode_chat = ModelExecutor.encode_chat

    def gated(call: object) -> object:
        def wrapper(self: ModelExecutor, arg: object) -> list[int]:
            state.pass_through()
            return call(self, arg)  # type: ignore[operator,no-any-return]  # the real method

        return wrapper

    monkeypatch.setattr(ModelExecutor, "encode_prompt", gated(encode_prompt))
    monkeypatch.setattr(ModelExecutor, "encode_chat", gated(encode_chat))
    yield state
    state.opened.set()


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/completions", {"model": "tiny-lm", "prompt": "def add(a, b):", "max_tokens": 2}),
        (
            "/v1/chat/completions",
            {"model": "tiny-lm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
        ),
        ("/v2/models/tiny-lm/generate", {"text_input": "def", "parameters": {"max_tokens": 2}}),
    ],
)
async def test_probes_answer_while_a_prompt_is_tokenized(
    both: Edges, gate: Gate, route: str, body: dict[str, object]
) -> None:
    health, response = await probed_while_held(
        gate, both.rest.post(route, json=body), lambda: both.rest.get("/healthz")
    )
    assert health.status_code == 200
    assert response.status_code == 200, response.text
    assert gate.opened_in_time == [True]


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("/v1/completions", {"model": "tiny-lm", "prompt": TWENTY_MB, "max_tokens": 2}),
        (
            "/v1/chat/completions",
            {"model": "tiny-lm", "messages": [{"role": "user", "content": TWENTY_MB}]},
        ),
        ("/v2/models/tiny-lm/generate", {"text_input": TWENTY_MB}),
    ],
)
async def test_a_prompt_that_can_never_fit_is_refused_before_tokenizing(
    both: Edges, gate: Gate, route: str, body: dict[str, object]
) -> None:
    response = await both.rest.post(route, json=body)
    assert response.status_code == 400
    text = response.text
    assert "characters" in text
    assert "refused without tokenizing" in text
    assert gate.calls == 0


async def test_a_prompt_within_the_character_bound_but_over_the_context_is_still_refused(
    both: Edges,
) -> None:
    """The bound is safe, not tight: tokens decide after it (the engine's own check)."""
    prompt = "def f(x): return x\n" * 400  # far more tokens than tiny-lm's context
    assert len(prompt) < 512 * MAX_CHARS_PER_TOKEN
    response = await both.rest.post(
        "/v1/completions", json={"model": "tiny-lm", "prompt": prompt, "max_tokens": 2}
    )
    assert response.status_code == 400
    assert "token" in response.json()["error"]["message"]


async def test_a_huge_embeddings_text_is_cut_to_what_the_encoder_keeps(both: Edges) -> None:
    """Twenty megabytes of text embed like their first characters: the encoder keeps
    256 tokens either way, and the cut happens before tokenizing (RSS measured in
    benchmarks/big_inputs.py)."""
    head = "the quick brown fox jumps over the lazy dog " * 200
    huge = head + "z" * (20 * 1024 * 1024)
    response = await both.rest.post(
        "/v1/embeddings", json={"model": "minilm", "input": [huge, head]}
    )
    assert response.status_code == 200, response.text
    doc = response.json()
    first, second = (item["embedding"] for item in doc["data"])
    assert first == pytest.approx(second, abs=1e-5)
    assert doc["usage"]["prompt_tokens"] == 2 * 256
