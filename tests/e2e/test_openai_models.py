"""OpenAI's `GET /v1/models/{model}` against the real server, with the openai SDK's
`client.models.retrieve` as the client: a served model is its entry in the list, any
other id (one holding a "/" too) is a 404 in OpenAI's error shape."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from tests.support.server import ServerProcess, wait_until, write_model


@pytest.fixture(scope="module")
def models_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("models")
    write_model(root, "echo", warmup=False)
    write_model(root, "lazy", warmup=False, preload=False)  # known, never loaded
    with ServerProcess("--model-repository", str(root)) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=60, what="ready")
        yield process


@pytest.fixture
def client(models_server: ServerProcess) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=models_server.url + "/v1", api_key="x", max_retries=0) as sdk:
        yield sdk


def test_retrieve_answers_the_model_as_the_list_does(client: openai.OpenAI) -> None:
    listed = {m.id: m for m in client.models.list()}
    assert list(listed) == ["echo"]
    model = client.models.retrieve("echo")
    assert model.id == "echo"
    assert model.object == "model"
    assert model.model_dump() == listed["echo"].model_dump()


@pytest.mark.parametrize(
    ("model_id", "message"),
    [
        ("nope", "Request for unknown model: 'nope' is not found"),
        ("lazy", "model 'lazy' is not loaded"),
        # the SDK sends org%2Fecho; the whole rest of the path is the id
        ("org/echo", "Request for unknown model: 'org/echo' is not found"),
    ],
)
def test_retrieve_of_a_model_not_served_is_openais_model_not_found(
    client: openai.OpenAI, model_id: str, message: str
) -> None:
    with pytest.raises(openai.NotFoundError) as missing:
        client.models.retrieve(model_id)
    assert missing.value.status_code == 404
    assert missing.value.body == {
        "message": message,
        "type": "not_found_error",
        "param": None,
        "code": "model_not_found",
    }


def test_an_id_with_a_slash_sent_unencoded_is_one_id(models_server: ServerProcess) -> None:
    # older openai SDKs put the id into the path as it is
    with httpx.Client(base_url=models_server.url) as http:
        response = http.get("/v1/models/org/echo")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"
    assert response.json()["error"]["message"] == (
        "Request for unknown model: 'org/echo' is not found"
    )
