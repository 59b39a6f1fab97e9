"""Generation admission is one synchronous step before the status line (issue 13, bug 3):
through the real ASGI app and the real data plane over the real tiny LM, a request that
can never fit is a 400 and a full queue a 503 with Retry-After — as statuses, never as an
error event inside a 200 stream."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from podserve.config.settings import ServerSettings
from podserve.dataplane import DataPlane
from podserve.dataplane.build import build_dataplane
from podserve.server.app import App

pytest.importorskip("transformers")

TINY = Path(__file__).resolve().parents[2] / "examples" / "models" / "tiny-lm"
LONG_PROMPT = "word " * 80  # about 80 tokens: over a 64-token KV budget


@pytest.fixture
async def lm(tmp_path: Path) -> AsyncIterator[tuple[DataPlane, httpx.AsyncClient]]:
    directory = tmp_path / "models" / "lm"
    shutil.copytree(TINY, directory)
    config = yaml.safe_load((directory / "model.yaml").read_text())
    config["name"] = "lm"
    # one running sequence, a queue of one, and a KV budget below the context (512)
    config["parameters"] = {"max_num_seqs": 1, "kv_cache_tokens": 64, "torch_threads": 1}
    config["limits"] = {"max_queue": 1}
    (directory / "model.yaml").write_text(yaml.safe_dump(config))
    settings = ServerSettings(
        model_repository=tmp_path / "models", cache_dir=tmp_path / "cache", grpc_port=-1
    )
    plane = build_dataplane(settings, asyncio.get_running_loop())
    await plane.load_preloaded()
    transport = httpx.ASGITransport(app=App(plane))
    async with httpx.AsyncClient(transport=transport, base_url="http://podserve") as client:
        yield plane, client
    await plane.unload_model("lm")


def completion(prompt: str, **extra: object) -> dict[str, object]:
    return {"model": "lm", "prompt": prompt, "max_tokens": 8, "temperature": 0, **extra}


async def test_refusals_are_statuses_before_the_stream(
    lm: tuple[DataPlane, httpx.AsyncClient],
) -> None:
    plane, client = lm
    # A prompt the KV budget can never hold: 400 on every generation route, streaming too.
    for stream in (False, True):
        response = await client.post("/v1/completions", json=completion(LONG_PROMPT, stream=stream))
        assert response.status_code == 400, response.text
        assert "exceeds the KV cache of 64 tokens" in response.json()["error"]["message"]
    response = await client.post(
        "/v2/models/lm/generate_stream",
        json={"text_input": LONG_PROMPT, "parameters": {"max_tokens": 8}},
    )
    assert response.status_code == 400, response.text
    assert "exceeds the KV cache" in response.json()["error"]
    assert plane.inflight == 0

    # n=2 where the queue holds one: refused whole, as a 503 status with Retry-After.
    refused = await client.post(
        "/v1/completions", json=completion("The function", n=2, stream=True)
    )
    assert refused.status_code == 503, refused.text
    assert "waiting" in refused.json()["error"]["message"]
    assert int(refused.headers["retry-after"]) >= 1
    assert plane.inflight == 0

    # What fits is served, streamed to its end, and settles the drain count.
    async with client.stream(
        "POST", "/v1/completions", json=completion("The function", stream=True)
    ) as ok:
        assert ok.status_code == 200
        events = [line async for line in ok.aiter_lines() if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    assert plane.inflight == 0
