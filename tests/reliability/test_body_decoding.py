"""A big JSON body is decoded off the pod's event loop; a small one on it.

The pod's app is served over real HTTP on 127.0.0.1 in this test's event loop
(`tests.support.planes.loopback`), so the test can hold each route's real decode at a
gate (tests/support/gate.py): while a big body's decode is held, `/healthz` still answers
through the server's sockets, and the decode is seen on the pod's decoding thread. Had the
decode run on the loop, nothing could answer until the gate gave up. A small body's
decode runs on the loop's own thread: the hot path pays no thread hop. A big body's decode
runs with the cyclic collector off (httpedge/decoding.py), and the collector is on again
once it is done.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
import pytest_asyncio

from podserve.httpedge.decoding import INLINE_BYTES
from podserve.protocol.json_body import MAX_JSON_VALUES, over_limit
from podserve.protocol.openai import completions
from podserve.server import routes_generate, routes_openai, routes_v2
from tests.support.gate import Gate, probed_while_held
from tests.support.planes import Loopback, loopback

pytestmark = pytest.mark.asyncio(loop_scope="module")

DECODING_THREAD = "podserve-body-decode_0"
PADDING = "u" * INLINE_BYTES  # an ignored field: the body is big, the request still valid

# route -> (the module whose decode function the route calls, its name, a request body)
ROUTES: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "chat": (
        completions,
        "decode_request",
        {"model": "tiny-lm", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
    ),
    "completions": (
        completions,
        "decode_request",
        {"model": "tiny-lm", "prompt": "def", "max_tokens": 1},
    ),
    "embeddings": (routes_openai, "decode_embedding_request", {"model": "minilm", "input": "hi"}),
    "generate": (
        routes_generate,
        "decode_generate_request",
        {"text_input": "def", "parameters": {"max_tokens": 1}},
    ),
    "v2-infer": (
        routes_v2,
        "decode_infer_request",
        {
            "inputs": [
                {
                    "name": "features",
                    "shape": [1, 4],
                    "datatype": "FP32",
                    "data": [[5.1, 3.5, 1.4, 0.2]],
                }
            ]
        },
    ),
}
# where a body's unknown field makes it big (OIP's `id` is free text)
PADDING_FIELD = {"v2-infer": "id"}
PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "embeddings": "/v1/embeddings",
    "generate": "/v2/models/tiny-lm/generate",
    "v2-infer": "/v2/models/iris/infer",
}


@dataclass
class DecodeGate(Gate):
    collecting: list[bool] = field(default_factory=list)  # gc.isenabled() in each call


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def pod(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Loopback]:
    examples = ("iris", "minilm", "tiny-lm")
    async with loopback(tmp_path_factory.mktemp("decoding"), examples) as served:
        yield served


@pytest.fixture(params=sorted(ROUTES))
def route(request: pytest.FixtureRequest) -> str:
    name: str = request.param
    return name


@pytest.fixture
def gate(monkeypatch: pytest.MonkeyPatch, route: str) -> Iterator[DecodeGate]:
    state = DecodeGate()
    module, name, _ = ROUTES[route]
    decode: Callable[..., Any] = getattr(module, name)

    def gated(*args: Any, **kwargs: Any) -> Any:
        state.pass_through()
        state.collecting.append(gc.isenabled())
        return decode(*args, **kwargs)

    monkeypatch.setattr(module, name, gated)
    yield state
    state.opened.set()


async def test_a_big_body_is_decoded_off_the_loop_while_probes_answer(
    pod: Loopback, gate: DecodeGate, route: str
) -> None:
    body = {**ROUTES[route][2], PADDING_FIELD.get(route, "user"): PADDING}
    health, response = await probed_while_held(
        gate, pod.http.post(PATHS[route], json=body), lambda: pod.http.get("/healthz")
    )
    assert health.status_code == 200
    assert response.status_code == 200, response.text[:300]
    assert gate.opened_in_time == [True]
    assert gate.threads == [DECODING_THREAD]
    assert gate.collecting == [False]
    assert gc.isenabled()


async def test_a_small_body_is_decoded_on_the_loop(
    pod: Loopback, gate: DecodeGate, route: str
) -> None:
    gate.opened.set()
    response = await pod.http.post(PATHS[route], json=ROUTES[route][2])
    assert response.status_code == 200, response.text[:300]
    assert gate.threads == [threading.current_thread().name]


async def test_100k_chat_messages_are_decoded_and_refused_off_the_loop(pod: Loopback) -> None:
    """The body of the original report: 3 MB of valid messages. Refused on its length,
    on the decoding thread (seen by the thread that builds the refusal)."""
    seen: list[str] = []

    def watched(*args: Any) -> Any:
        seen.append(threading.current_thread().name)
        return over_limit(*args)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("podserve.protocol.openai.completions.over_limit", watched)
        messages = [{"role": "user", "content": "x"}] * 100_000
        response = await pod.http.post(
            "/v1/chat/completions", json={"model": "tiny-lm", "messages": messages}
        )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "'messages': 100000 messages; at most 2048"
    assert seen == [DECODING_THREAD]


async def test_a_body_of_millions_of_tiny_values_is_refused_unparsed(pod: Loopback) -> None:
    """16.8 MB of empty lists took seconds to parse in a pod (orjson builds each, and the
    collector walks the process for them); counted over the bytes first, it is refused
    before any is built: the parse is never called."""
    parsed: list[bytes] = []

    def watched(body: bytes) -> Any:
        parsed.append(body)
        return orjson.loads(body)

    junk = b"[" + b"[]," * (MAX_JSON_VALUES // 2 + 1) + b"[]]"
    body = b'{"model":"tiny-lm","messages":[{"role":"user","content":"x"}],"junk":' + junk + b"}"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("podserve.protocol.json_body.orjson.loads", watched)
        response = await pod.http.post(
            "/v1/chat/completions", content=body, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    message = response.json()["error"]["message"]
    assert f"at most {MAX_JSON_VALUES}" in message, message
    assert parsed == []


async def test_a_long_valid_prompt_is_under_the_values_bound(pod: Loopback) -> None:
    """A prompt longer than the bound in bytes, with prose's commas, is not refused by
    it (the byte count alone never refuses)."""
    prompt = "one, two, three and four. " * (MAX_JSON_VALUES // 26 + 1)
    body = orjson.dumps({"model": "tiny-lm", "prompt": prompt, "max_tokens": 1})
    assert len(body) > MAX_JSON_VALUES
    response = await pod.http.post(
        "/v1/completions", content=body, headers={"content-type": "application/json"}
    )
    # refused for its length in tokens (the model's context), not for its JSON values
    assert response.status_code == 400
    assert "JSON values" not in response.text, response.text[:300]
