"""A second text engine is one module registered like a runtime: this test declares an
echo engine (an `EngineClient` that streams the prompt back, one character a token),
registers it with `register_engine`, and serves it through the real data plane (the
real repository, `EngineWorker`, admission accounting, the edges) on OpenAI's
/v1/completions, Triton's generate extension, and gRPC ModelStreamInfer with the vLLM
backend's tensors — with no change outside this file."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc.aio as triton_aio
from pydantic import Field

from podserve.config.settings import ServerSettings
from podserve.core.errors import Unavailable
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from podserve.generation.client import EngineClient, TokenStream
from podserve.generation.engine import EngineStats
from podserve.generation.registry import (
    EngineContext,
    TextEngine,
    register_engine,
    unregister_engine,
)
from podserve.generation.sampling import SamplingParams
from podserve.generation.stream import FinishReason, TokenEvent
from podserve.runtimes.parameters import RuntimeParameters
from podserve.server.app import App
from podserve.server.grpc import start_grpc_server, stop_grpc_server
from tests.support.server import write_model


class EchoParameters(RuntimeParameters):
    max_streams: int = Field(4, ge=1, description="Sequences streaming at once.")
    suffix: str = Field("", description="Text appended after the echo.")


class _EchoStream:
    def __init__(self, engine: EchoEngine, tokens: list[int], max_tokens: int) -> None:
        self._engine = engine
        self._tokens = tokens[:max_tokens]
        self._finish: FinishReason = "length" if len(tokens) > max_tokens else "stop"
        self._closed = False

    def __aiter__(self) -> AsyncIterator[TokenEvent]:
        return self

    async def __anext__(self) -> TokenEvent:
        if self._closed or not self._tokens:
            self.close()
            raise StopAsyncIteration
        await asyncio.sleep(0)  # a real engine yields to the loop between tokens
        token = self._tokens.pop(0)
        finish = self._finish if not self._tokens else None
        return TokenEvent(token, chr(token), finish)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.running -= 1


class EchoEngine:
    """An `EngineClient`: token ids are code points; `admit` refuses past max_streams."""

    def __init__(self, context: EngineContext[EchoParameters]) -> None:
        self.params = context.parameters
        self.running = 0
        self.closed = False

    @property
    def max_context(self) -> int:
        return 1024

    def encode_prompt(self, text: str) -> list[int]:
        return [ord(c) for c in text + self.params.suffix]

    def encode_chat(self, messages: Sequence[Mapping[str, str]]) -> list[int]:
        return self.encode_prompt(" ".join(m["content"] for m in messages))

    def token_text(self, token_id: int) -> str:
        return chr(token_id)

    def admit(
        self, prompt_ids: Sequence[int], sequences: Sequence[SamplingParams]
    ) -> list[TokenStream]:
        if self.running + len(sequences) > self.params.max_streams:
            raise Unavailable("echo is busy", reason="queue_full", retry_after_s=2)
        self.running += len(sequences)
        return [_EchoStream(self, list(prompt_ids), p.max_tokens) for p in sequences]

    def stats(self) -> EngineStats:
        return EngineStats(self.running, 0, 0.0, 0, 0, 0)

    def close(self) -> None:
        self.closed = True


ENGINES: list[EchoEngine] = []


def create(context: EngineContext[EchoParameters]) -> EngineClient:
    engine = EchoEngine(context)
    ENGINES.append(engine)
    return engine


@pytest.fixture
def echo_engine() -> Iterator[None]:
    register_engine(TextEngine("echo", EchoParameters, create))
    ENGINES.clear()
    try:
        yield
    finally:
        unregister_engine("echo")


@pytest.fixture
async def plane(tmp_path: Path, echo_engine: None) -> AsyncIterator[DataPlane]:
    models = tmp_path / "models"
    write_model(models, "echo", runtime="echo", parameters={"suffix": "!", "max_streams": 2})
    settings = ServerSettings(model_repository=models, cache_dir=tmp_path / "cache", grpc_port=-1)
    dataplane = build_dataplane(settings, asyncio.get_running_loop())
    await dataplane.load_preloaded()
    assert dataplane.startup().ok, dataplane.startup()
    yield dataplane
    with contextlib.suppress(Exception):
        await dataplane.unload_model("echo")


@pytest.fixture
async def rest(plane: DataPlane) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=App(plane))
    async with httpx.AsyncClient(transport=transport, base_url="http://podserve") as client:
        yield client


async def test_openai_completions(rest: httpx.AsyncClient, plane: DataPlane) -> None:
    response = await rest.post(
        "/v1/completions", json={"model": "echo", "prompt": "hello", "max_tokens": 4}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["choices"][0]["text"] == "hell"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 6, "completion_tokens": 4, "total_tokens": 10}
    assert plane.serving_state().models[0].inflight == 0  # the stream was settled
    assert ENGINES[0].running == 0


async def test_openai_streaming_and_the_engines_refusal(rest: httpx.AsyncClient) -> None:
    request = {"model": "echo", "prompt": "hi", "max_tokens": 8, "stream": True}
    async with rest.stream("POST", "/v1/completions", json=request) as response:
        assert response.status_code == 200
        text = await response.aread()
    assert b'"text":"h"' in text
    assert b"data: [DONE]" in text
    # n=3 over max_streams=2: the engine's `admit` refuses before the status line
    response = await rest.post("/v1/completions", json={**request, "stream": False, "n": 3})
    assert response.status_code == 503, response.text
    assert response.headers["retry-after"] == "2"
    assert response.json()["error"]["message"] == "echo is busy"  # OpenAI's error shape


async def test_triton_generate(rest: httpx.AsyncClient) -> None:
    response = await rest.post(
        "/v2/models/echo/generate", json={"text_input": "abc", "parameters": {"max_tokens": 16}}
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["model_name"], body["text_output"]) == ("echo", "abc!")
    # a tensor request to a text engine is refused by the worker, naming the routes
    response = await rest.post(
        "/v2/models/echo/infer",
        json={"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1]}]},
    )
    assert response.status_code == 400
    assert "/v2/models/echo/generate" in response.json()["error"]


async def test_grpc_stream_infer_with_vllm_tensors(plane: DataPlane) -> None:
    server, port = await start_grpc_server(plane, "127.0.0.1", 0, max_message_bytes=1 << 20)
    try:
        async with triton_aio.InferenceServerClient(f"127.0.0.1:{port}") as client:
            text = triton_aio.InferInput("text_input", [1], "BYTES")
            text.set_data_from_numpy(np.array([b"xyz"], dtype=np.object_))

            async def requests() -> AsyncIterator[dict[str, Any]]:
                yield {"model_name": "echo", "inputs": [text]}

            outputs = []
            async for result, error in client.stream_infer(requests()):
                assert error is None, error
                outputs.append(result.as_numpy("text_output"))
    finally:
        await stop_grpc_server(server, grace_s=0)
    assert [o.tolist() for o in outputs] == [[b"xyzxyz!"]]  # the prompt, then the echo


async def test_unloading_closes_the_engine(plane: DataPlane) -> None:
    await plane.unload_model("echo")
    assert ENGINES[0].closed


def test_a_typo_in_the_engines_parameters_fails_the_load(tmp_path: Path, echo_engine: None) -> None:
    from podserve.config.model_config import load_model_config
    from podserve.core.errors import ModelLoadFailed
    from podserve.repository.loading import load_and_warm

    write_model(tmp_path, "echo", runtime="echo", parameters={"sufix": "!"})
    with pytest.raises(ModelLoadFailed, match=r"unknown parameter 'sufix'.*max_streams, suffix"):
        load_and_warm(load_model_config(tmp_path / "echo"))
