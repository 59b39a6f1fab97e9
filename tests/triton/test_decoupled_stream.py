"""Decoupled streaming over gRPC ModelStreamInfer, as Triton's vLLM backend does it
(src/model.py and src/utils/request.py in github.com/triton-inference-server/
vllm_backend): `text_input` in, one response per token batch with the new text in
`text_output`, every response carrying the `triton_final_response` parameter and only
the last one true (Triton's stream handler sets it, src/grpc/stream_infer_handler.cc).
The client is tritonclient.grpc's streaming API, callback and asyncio."""

from __future__ import annotations

import json
import queue
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpc_aio

from tests.support.server import ServerProcess, wait_until

pytest.importorskip("transformers")

PROMPT = "Return the number of"


def _request(module: Any, prompt: str, *, stream: bool | None, **sampling: Any) -> list[Any]:
    text = module.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=object))
    inputs = [text]
    if stream is not None:
        flag = module.InferInput("stream", [1], "BOOL")
        flag.set_data_from_numpy(np.array([stream], dtype=bool))
        inputs.append(flag)
    if sampling:
        params = module.InferInput("sampling_parameters", [1], "BYTES")
        params.set_data_from_numpy(np.array([json.dumps(sampling).encode()], dtype=object))
        inputs.append(params)
    return inputs


def _final(result: Any) -> bool:
    return bool(result.get_response().parameters["triton_final_response"].bool_param)


def _run(client: grpcclient.InferenceServerClient, requests: list[dict[str, Any]]) -> list[Any]:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        for request in requests:
            client.async_stream_infer("tiny-lm", **request)
    finally:
        client.stop_stream()  # waits for every answer
    out = []
    while not answers.empty():
        result, error = answers.get()
        assert error is None, error
        out.append(result)
    return out


def test_tokens_stream_with_the_final_flag_on_the_last(
    grpc: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    sampling = {"temperature": 0, "max_tokens": 12}
    results = _run(
        grpc,
        [{"inputs": _request(grpcclient, PROMPT, stream=True, **sampling), "request_id": "s-1"}],
    )
    assert len(results) > 1  # streamed, not one answer at the end
    assert [_final(r) for r in results] == [False] * (len(results) - 1) + [True]
    assert {r.get_response().id for r in results} == {"s-1"}
    pieces = [r.as_numpy("text_output") for r in results]
    assert all(p.shape == (1,) and p.dtype == object for p in pieces)
    streamed = "".join(p[0].decode() for p in pieces)
    # The same prompt through Triton's generate extension gives the same greedy text.
    with server.client() as client:
        whole = client.post(
            "/v2/models/tiny-lm/generate", json={"text_input": PROMPT, "parameters": sampling}
        )
    assert streamed == whole.json()["text_output"]


def test_without_stream_one_final_answer_with_the_prompt_in_front(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    sampling = {"temperature": 0, "max_tokens": 8}
    (only,) = _run(grpc, [{"inputs": _request(grpcclient, PROMPT, stream=False, **sampling)}])
    assert _final(only)
    text = only.as_numpy("text_output")[0].decode()
    assert text.startswith(PROMPT)
    assert len(text) > len(PROMPT)


def test_requests_on_one_stream_are_told_apart_by_id(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    sampling = {"temperature": 0, "max_tokens": 6}
    requests = [
        {"inputs": _request(grpcclient, p, stream=True, **sampling), "request_id": f"r{i}"}
        for i, p in enumerate(["The list of", "Return a new"])
    ]
    results = _run(grpc, requests)
    for request_id in ("r0", "r1"):
        mine = [r for r in results if r.get_response().id == request_id]
        assert mine
        assert [_final(r) for r in mine][-1] is True
        assert sum(_final(r) for r in mine) == 1


async def test_asyncio_stream_infer(server: ServerProcess) -> None:
    async with grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as client:

        async def requests() -> Any:
            yield {
                "model_name": "tiny-lm",
                "inputs": _request(grpc_aio, PROMPT, stream=True, temperature=0, max_tokens=5),
                "request_id": "aio",
            }

        flags = []
        async for result, error in client.stream_infer(requests()):
            assert error is None
            flags.append(_final(result))
            if flags[-1]:
                break
        assert flags[-1] is True
        assert flags.count(True) == 1


def test_bad_sampling_parameters_are_an_in_band_error(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    grpc.async_stream_infer(
        "tiny-lm", _request(grpcclient, PROMPT, stream=True, temperature=-3, max_tokens=4)
    )
    bad = grpcclient.InferInput("sampling_parameters", [1], "BYTES")
    bad.set_data_from_numpy(np.array([b"{not json"], dtype=object))
    grpc.async_stream_infer("tiny-lm", [_request(grpcclient, PROMPT, stream=True)[0], bad])
    grpc.stop_stream()
    errors = [answers.get()[1] for _ in range(2)]
    assert all(e is not None for e in errors)
    assert any("temperature" in e.message() for e in errors)
    assert any("sampling_parameters" in e.message() for e in errors)


def test_a_tensor_model_on_the_stream_still_answers_once_and_final(
    grpc: grpcclient.InferenceServerClient,
) -> None:
    inputs = [grpcclient.InferInput(n, [1, 16], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(np.ones((1, 16), dtype=np.int32))
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    grpc.async_stream_infer("simple", inputs, request_id="t")
    grpc.stop_stream()
    result, error = answers.get()
    assert error is None
    assert _final(result)
    assert result.as_numpy("OUTPUT0").tolist() == [[2] * 16]


def test_a_client_that_leaves_mid_stream_frees_its_sequence(
    grpc: grpcclient.InferenceServerClient, server: ServerProcess
) -> None:
    model = {"model": "tiny-lm"}
    before = server.metric("podserve_generation_tokens_total", model)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    grpc.start_stream(callback=lambda result, error: answers.put((result, error)))
    long = _request(grpcclient, PROMPT, stream=True, max_tokens=250, ignore_eos=True)
    grpc.async_stream_infer("tiny-lm", long, request_id="leaves")
    result, error = answers.get(timeout=60)  # generating
    assert error is None
    assert not _final(result)
    grpc.stop_stream(cancel_requests=True)
    # The sequence's tokens are counted when it ends: fewer than the 250 it would have
    # made (ignore_eos) means it was aborted, its slot and KV cache freed.
    wait_until(
        lambda: server.metric("podserve_generation_tokens_total", model) > before,
        what="the sequence to end",
    )
    assert server.metric("podserve_generation_tokens_total", model) - before < 250
    assert server.metric("podserve_num_requests_running", model) == 0
