"""Deadlines end text generation on both edges (bug 5), against a real `podserve serve`
on 127.0.0.1 with the bundled tiny LM: `x-request-timeout-ms` on /v1/completions and the
generate extension, Triton's `timeout` parameter on the generate extension and gRPC
ModelStreamInfer (the vLLM backend's tensors, through tritonclient.grpc), and the model's
`limits.default_timeout_s` on both edges.

Each generation asks for far more tokens (480, EOS ignored) than fit in its deadline, so
a test passes only if the deadline's error arrives instead of a full result: a 504 before
any byte, or, once a stream has started, the protocol's in-band error with no finish.
After each, the engine holds no sequence and serves the next request to its end."""

from __future__ import annotations

import json
import queue
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import yaml

from tests.support.server import ServerProcess, wait_until

pytest.importorskip("transformers")

TINY = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-lm"
PROMPT = "The function returns"
LONG = {"max_tokens": 480, "ignore_eos": True, "temperature": 1.0}  # seconds of decoding
HEADER = {"x-request-timeout-ms": "300"}


def _tiny_lm(root: Path, name: str, **limits: float) -> None:
    """The bundled tiny LM's files under another name, its token cap raised so that one
    request can outlast a deadline many times over."""
    directory = root / name
    directory.mkdir()
    for item in TINY.iterdir():
        if item.name != "model.yaml":
            (directory / item.name).symlink_to(item)
    config = yaml.safe_load((TINY / "model.yaml").read_text())
    config["name"] = name
    config["parameters"]["max_tokens_cap"] = 500
    config["limits"] = {**config.get("limits", {}), **limits}
    (directory / "model.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("models")
    _tiny_lm(root, "slow-lm")
    _tiny_lm(root, "timed-lm", default_timeout_s=0.3)
    with ServerProcess(
        "--model-repository", str(root), grpc=True, env={"HF_HUB_OFFLINE": "1"}
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=120, what="ready")
        yield process


def _sse(lines: Iterator[str]) -> list[Any]:
    """The events of a server-sent-event body: JSON objects, and "[DONE]"."""
    events: list[Any] = []
    for line in lines:
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def _assert_engine_free_and_serving(server: ServerProcess, model: str) -> None:
    labels = {"model": model}
    assert server.metric("podserve_num_requests_running", labels) == 0
    assert server.metric("podserve_num_requests_waiting", labels) == 0
    assert server.metric("podserve_inflight_requests", labels) == 0
    with server.client() as client:
        after = client.post(
            "/v1/completions", json={"model": model, "prompt": PROMPT, "max_tokens": 4}
        )
    assert after.status_code == 200, after.text
    assert after.json()["choices"][0]["finish_reason"] in ("stop", "length")


# --- REST ------------------------------------------------------------------------------


def test_completions_answer_504_when_the_header_deadline_passes(server: ServerProcess) -> None:
    body = {"model": "slow-lm", "prompt": PROMPT, "n": 2, **LONG}
    with server.client() as client:
        response = client.post("/v1/completions", json=body, headers=HEADER)
    assert response.status_code == 504, response.text[:200]
    error = response.json()["error"]
    assert (error["type"], error["code"]) == ("timeout", "deadline_exceeded")
    assert "deadline passed" in error["message"]
    _assert_engine_free_and_serving(server, "slow-lm")


def test_a_completion_stream_ends_with_an_error_event_not_a_finish(
    server: ServerProcess,
) -> None:
    body = {"model": "slow-lm", "prompt": PROMPT, "stream": True, **LONG}
    with (
        server.client() as client,
        client.stream("POST", "/v1/completions", json=body, headers=HEADER) as response,
    ):
        assert response.status_code == 200  # admitted: the headers left before the deadline
        events = _sse(response.iter_lines())
    *chunks, error, done = events
    assert done == "[DONE]"
    assert error["error"]["code"] == "deadline_exceeded"
    assert all(chunk["choices"][0]["finish_reason"] is None for chunk in chunks)
    _assert_engine_free_and_serving(server, "slow-lm")


def test_generate_answers_504_when_the_header_deadline_passes(server: ServerProcess) -> None:
    body = {"text_input": PROMPT, "parameters": LONG}
    with server.client() as client:
        response = client.post("/v2/models/slow-lm/generate", json=body, headers=HEADER)
    assert response.status_code == 504, response.text[:200]
    assert "deadline passed" in response.json()["error"]
    _assert_engine_free_and_serving(server, "slow-lm")


def test_generate_stream_ends_with_an_error_event_not_a_finish(server: ServerProcess) -> None:
    body = {"text_input": PROMPT, "parameters": LONG}
    with (
        server.client() as client,
        client.stream(
            "POST", "/v2/models/slow-lm/generate_stream", json=body, headers=HEADER
        ) as response,
    ):
        assert response.status_code == 200
        events = _sse(response.iter_lines())
    *tokens, error = events
    assert "deadline passed" in error["error"]
    assert all(token["finish_reason"] is None for token in tokens)
    _assert_engine_free_and_serving(server, "slow-lm")


def test_the_models_default_deadline_applies_on_rest_too(server: ServerProcess) -> None:
    body = {"model": "timed-lm", "prompt": PROMPT, **LONG}
    with server.client() as client:
        response = client.post("/v1/completions", json=body)
    assert response.status_code == 504, response.text[:200]
    _assert_engine_free_and_serving(server, "timed-lm")


# --- gRPC ModelStreamInfer, the vLLM backend's tensors ------------------------------------


def _vllm_inputs(*, stream: bool) -> list[grpcclient.InferInput]:
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([PROMPT.encode()], dtype=object))
    flag = grpcclient.InferInput("stream", [1], "BOOL")
    flag.set_data_from_numpy(np.array([stream], dtype=bool))
    sampling = grpcclient.InferInput("sampling_parameters", [1], "BYTES")
    sampling.set_data_from_numpy(np.array([json.dumps(LONG).encode()], dtype=object))
    return [text, flag, sampling]


@pytest.mark.parametrize("stream", [True, False], ids=["decoupled-stream", "one-answer"])
def test_stream_infer_answers_deadline_exceeded_in_band(
    server: ServerProcess, stream: bool
) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            client.async_stream_infer("timed-lm", _vllm_inputs(stream=stream), request_id="late")
        finally:
            client.stop_stream()  # returns once the server answered the request
    received = [answers.get_nowait() for _ in range(answers.qsize())]
    errors = [error for _, error in received if error is not None]
    results = [result for result, error in received if error is None]
    assert len(errors) == 1, received
    assert "deadline passed" in str(errors[0])
    # tokens may have streamed before the deadline, but none was the last one
    finals = [r.get_response().parameters["triton_final_response"].bool_param for r in results]
    assert not any(finals)
    _assert_engine_free_and_serving(server, "timed-lm")


# --- Triton's `timeout` request parameter (microseconds), as tensor inference takes it -----


def test_generate_takes_tritons_timeout_parameter(server: ServerProcess) -> None:
    body = {"text_input": PROMPT, "parameters": {**LONG, "timeout": 300_000}}
    with server.client() as client:
        response = client.post("/v2/models/slow-lm/generate", json=body)
        assert response.status_code == 504, response.text[:200]
        # validated as /infer validates it
        bad = {"text_input": PROMPT, "parameters": {"timeout": "soon"}}
        refused = client.post("/v2/models/slow-lm/generate", json=bad)
    assert refused.status_code == 400
    assert "parameters.timeout (microseconds" in refused.json()["error"]
    _assert_engine_free_and_serving(server, "slow-lm")


def test_stream_infer_takes_tritons_timeout_parameter(server: ServerProcess) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    with grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        try:
            # tritonclient sends it as parameters["timeout"].int64_param, in microseconds
            client.async_stream_infer(
                "slow-lm", _vllm_inputs(stream=True), request_id="late", timeout=300_000
            )
        finally:
            client.stop_stream()
    received = [answers.get_nowait() for _ in range(answers.qsize())]
    errors = [error for _, error in received if error is not None]
    assert len(errors) == 1, received
    assert "deadline passed" in str(errors[0])
    _assert_engine_free_and_serving(server, "slow-lm")
