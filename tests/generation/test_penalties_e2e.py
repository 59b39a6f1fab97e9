"""presence_penalty and frequency_penalty end to end: a real `podserve serve` on the bundled
tiny LM, the openai SDK as the client, /v1/completions and /v1/chat/completions, streamed
and not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from tests.support.server import ServerProcess, wait_until

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[2]
# Greedy, the tiny LM answers " same of the same of the same value." (see
# test_engine_penalties.py)
REPEATS = "The list of the list of the"
# Greedy, the answer starts "Return the current process's process.": " process" twice.
CHAT: list[ChatCompletionMessageParam] = [{"role": "user", "content": "What does json.dumps do?"}]
NO_EOS = {"ignore_eos": True}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with ServerProcess(
        "--model", f"tiny={ROOT / 'examples/models/tiny-lm'}", env={"HF_HUB_OFFLINE": "1"}
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def complete(
    client: openai.OpenAI, presence: float = 0.0, frequency: float = 0.0, *, stream: bool = False
) -> str:
    """Greedy /v1/completions of REPEATS: the text, joined from the chunks when streamed."""
    result = client.completions.create(
        model="tiny",
        prompt=REPEATS,
        max_tokens=12,
        temperature=0,
        extra_body=NO_EOS,
        presence_penalty=presence,
        frequency_penalty=frequency,
        stream=stream,
    )
    if isinstance(result, openai.Stream):
        return "".join(chunk.choices[0].text for chunk in result if chunk.choices)
    return result.choices[0].text


def test_completions_frequency_penalty_stops_the_repetition(client: openai.OpenAI) -> None:
    plain = complete(client)
    assert plain.count(" same") == 3
    penalised = complete(client, frequency=2.0)
    assert penalised != plain
    assert penalised.count(" same") <= 1
    assert complete(client, frequency=2.0, stream=True) == penalised
    assert complete(client, stream=True) == plain


def test_completions_presence_penalty_changes_the_text(client: openai.OpenAI) -> None:
    plain = complete(client)
    penalised = complete(client, presence=1.5)
    assert penalised != plain
    assert complete(client, presence=1.5, stream=True) == penalised


def chat(
    client: openai.OpenAI, presence: float = 0.0, frequency: float = 0.0, *, stream: bool = False
) -> str:
    """Greedy /v1/chat/completions of CHAT: the reply, joined from the deltas when streamed."""
    result = client.chat.completions.create(
        model="tiny",
        messages=CHAT,
        max_tokens=24,
        temperature=0,
        extra_body=NO_EOS,
        presence_penalty=presence,
        frequency_penalty=frequency,
        stream=stream,
    )
    if isinstance(result, openai.Stream):
        return "".join(chunk.choices[0].delta.content or "" for chunk in result if chunk.choices)
    return result.choices[0].message.content or ""


def test_chat_penalties_streamed_and_not_agree_and_change_the_text(client: openai.OpenAI) -> None:
    plain = chat(client)
    assert plain.count(" process") == 2
    assert chat(client, stream=True) == plain
    for presence, frequency in ((0.0, 2.0), (2.0, 0.0)):
        penalised = chat(client, presence, frequency)
        assert penalised.count(" process") == 1, (presence, frequency, penalised)
        assert chat(client, presence, frequency, stream=True) == penalised


def test_sampled_penalised_choices_are_reproducible_with_a_seed(client: openai.OpenAI) -> None:
    def draw(presence: float, frequency: float) -> list[str]:
        result = client.completions.create(
            model="tiny",
            prompt=REPEATS,
            max_tokens=16,
            temperature=0.9,
            seed=11,
            n=2,
            presence_penalty=presence,
            frequency_penalty=frequency,
            extra_body=NO_EOS,
        )
        return [c.text for c in result.choices]

    penalised = draw(0.5, 2.0)
    assert len(penalised) == 2
    assert penalised == draw(0.5, 2.0)
    # the same seeds draw other tokens from the penalised distributions
    assert penalised != draw(0.0, 0.0)


@pytest.mark.parametrize("value", [2.5, -3.0])
def test_out_of_range_is_a_400_naming_the_field(client: openai.OpenAI, value: float) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        complete(client, frequency=value)
    assert caught.value.status_code == 400
    assert "frequency_penalty" in str(caught.value.message)
    with pytest.raises(openai.BadRequestError, match="presence_penalty"):
        chat(client, presence=value)


def test_triton_generate_applies_the_penalties_too(client: openai.OpenAI) -> None:
    url = f"{str(client.base_url).rstrip('/').removesuffix('/v1')}/v2/models/tiny/generate"

    def generate(**penalties: float) -> str:
        parameters = {"max_tokens": 12, "temperature": 0, "ignore_eos": True, **penalties}
        response = httpx.post(url, json={"text_input": REPEATS, "parameters": parameters})
        assert response.status_code == 200, response.text
        return str(response.json()["text_output"])

    assert generate() == complete(client)
    assert generate(frequency_penalty=2.0) == complete(client, frequency=2.0)
    assert generate(frequency_penalty=2.0).count(" same") <= 1
