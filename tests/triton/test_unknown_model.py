"""An unknown model is answered in Triton's words on both edges, with Triton's codes,
and no error names any other model this server has (core/src/model_repository_manager
in github.com/triton-inference-server/core: "Request for unknown model: 'x' is not
found", NOT_FOUND, which Triton's HTTP server maps to 404)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess

UNKNOWN = "wrong_model_name"
WORDS = f"Request for unknown model: '{UNKNOWN}' is not found"
SERVED = ("simple", "simple_string", "tiny-lm")


def _inputs(module: Any) -> list[Any]:
    inputs = [module.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    return inputs


def _error(call: Callable[[], object]) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def _no_other_model_named(message: str) -> None:
    assert not any(name in message for name in SERVED), message


@pytest.mark.parametrize("what", ["infer", "metadata", "config", "statistics"])
def test_http_answers_404_in_tritons_words(
    http: httpclient.InferenceServerClient, what: str
) -> None:
    calls: dict[str, Callable[[], object]] = {
        "infer": lambda: http.infer(UNKNOWN, _inputs(httpclient)),
        "metadata": lambda: http.get_model_metadata(UNKNOWN),
        "config": lambda: http.get_model_config(UNKNOWN),
        "statistics": lambda: http.get_inference_statistics(UNKNOWN),
    }
    error = _error(calls[what])
    assert error.status() == "404"
    assert error.message().startswith(WORDS)
    _no_other_model_named(error.message())


@pytest.mark.parametrize("what", ["infer", "metadata", "config", "statistics"])
def test_grpc_answers_not_found_in_tritons_words(
    grpc: grpcclient.InferenceServerClient, what: str
) -> None:
    calls: dict[str, Callable[[], object]] = {
        "infer": lambda: grpc.infer(UNKNOWN, _inputs(grpcclient)),
        "metadata": lambda: grpc.get_model_metadata(UNKNOWN),
        "config": lambda: grpc.get_model_config(UNKNOWN),
        "statistics": lambda: grpc.get_inference_statistics(UNKNOWN),
    }
    error = _error(calls[what])
    assert error.status() == "StatusCode.NOT_FOUND"
    assert error.message().startswith(WORDS)
    _no_other_model_named(error.message())


def test_an_unknown_version_names_the_version_not_the_others(
    http: httpclient.InferenceServerClient, grpc: grpcclient.InferenceServerClient
) -> None:
    words = "Request for unknown model: 'simple' version 7 is not found"
    error = _error(lambda: http.infer("simple", _inputs(httpclient), model_version="7"))
    assert (error.status(), error.message()) == ("404", words)
    error = _error(lambda: grpc.infer("simple", _inputs(grpcclient), model_version="7"))
    assert (error.status(), error.message()) == ("StatusCode.NOT_FOUND", words)


def test_openai_and_stream_errors_do_not_list_models(
    server: ServerProcess, grpc: grpcclient.InferenceServerClient
) -> None:
    with server.client() as client:
        body = client.post(
            "/v1/completions", json={"model": UNKNOWN, "prompt": "x", "max_tokens": 1}
        )
    assert body.status_code == 404
    _no_other_model_named(body.text)
    assert WORDS in body.json()["error"]["message"]
    # An in-band error of ModelStreamInfer carries the same words.
    answers: list[tuple[Any, Any]] = []
    grpc.start_stream(callback=lambda result, error: answers.append((result, error)))
    grpc.async_stream_infer(UNKNOWN, _inputs(grpcclient))
    grpc.stop_stream()
    ((result, error),) = answers
    assert result is None
    assert str(error.message()).startswith(WORDS)
