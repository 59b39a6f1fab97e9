"""`DataPlane.generate` keeps `infer`'s deadline (issue: bug 5): the same sources and
validation, a refusal before any work once it has passed, and, when it passes during the
generation, sequences aborted in the engine and a `DeadlineExceeded` for the reader; and
the OpenAI routes hand `x-request-timeout-ms` to the data plane, which they dropped. On
the real tiny LM, in process; tests/e2e/test_generation_deadlines.py drives both edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from podserve.core.errors import DeadlineExceeded, InvalidInput
from podserve.dataplane import CallContext, DataPlane, GenerateRequest
from podserve.generation.sampling import SamplingParams
from tests.support.planes import edges

pytest.importorskip("transformers")

# Far longer than any deadline below: a test cannot pass by the generation ending first.
LONG = GenerateRequest(
    model="tiny-lm",
    prompt="The function returns",
    sequences=(SamplingParams(temperature=0, max_tokens=256, ignore_eos=True),) * 2,
)


def _exposition(plane: DataPlane) -> str:
    return plane.metrics_exposition()[0].decode()


def _deadline_rejections(plane: DataPlane) -> str:
    line = 'podserve_rejected_requests_total{model="tiny-lm",reason="deadline"} '
    found = [row for row in _exposition(plane).splitlines() if row.startswith(line)]
    return found[0].removeprefix(line) if found else "none"


def _engine_idle(plane: DataPlane) -> bool:
    (model,) = [m for m in plane.serving_state().models if m.name == "tiny-lm"]
    assert model.generation is not None
    return model.generation.running == 0 and model.generation.waiting == 0


async def _read_all(plane: DataPlane, call: CallContext) -> None:
    generation = await plane.generate(LONG, call)
    for stream in generation.streams:
        async for _ in stream:
            pass


async def test_bad_or_passed_deadlines_are_refused_before_any_work(tmp_path: Path) -> None:
    async with edges(tmp_path, ("tiny-lm",)) as e:
        plane = e.plane
        with pytest.raises(InvalidInput, match="x-request-timeout-ms header"):
            await plane.generate(LONG, CallContext(timeout_ms="soon"))
        with pytest.raises(InvalidInput, match="positive finite"):
            await plane.generate(LONG, CallContext(timeout_ms="-5"))
        # a transport deadline already gone: infer's refusal, word for word
        with pytest.raises(
            DeadlineExceeded, match=r"^request deadline passed before it was queued; not computed$"
        ):
            await plane.generate(LONG, CallContext(client_timeout_s=0.0))
        assert plane.inflight == 0
        assert _engine_idle(plane)
        assert _deadline_rejections(plane) == "1.0"


async def test_a_deadline_that_passes_mid_generation_aborts_every_sequence(
    tmp_path: Path,
) -> None:
    async with edges(tmp_path, ("tiny-lm",)) as e:
        plane = e.plane
        with pytest.raises(DeadlineExceeded, match="generation stopped"):
            await _read_all(plane, CallContext(timeout_ms="150"))
        # both sequences left the engine and the drain's count; one request, one rejection
        assert plane.inflight == 0
        assert _engine_idle(plane)
        assert _deadline_rejections(plane) == "1.0"
        # the tokens made before the deadline are counted, as a cancelled request's are
        assert 'podserve_generation_tokens_total{model="tiny-lm"} 0.0' not in _exposition(plane)
        # and the engine serves the next request to its end
        generation = await plane.generate(
            GenerateRequest(
                model="tiny-lm", prompt="Return", sequences=(SamplingParams(max_tokens=4),)
            )
        )
        (stream,) = generation.streams
        assert [e.finish_reason async for e in stream][-1] in ("stop", "length")


async def test_the_server_default_deadline_applies_to_generation(tmp_path: Path) -> None:
    async with edges(tmp_path, ("tiny-lm",), default_timeout_s=0.15) as e:
        with pytest.raises(DeadlineExceeded, match="generation stopped"):
            await _read_all(e.plane, CallContext())
        assert e.plane.inflight == 0
        assert _engine_idle(e.plane)


async def test_every_openai_route_hands_the_header_to_the_data_plane(tmp_path: Path) -> None:
    # embeddings are tensor inference (`infer`), whose deadline the route dropped too
    async with edges(tmp_path, ("minilm", "tiny-lm")) as e:
        bodies = {
            "/v1/embeddings": {"model": "minilm", "input": "a sentence"},
            "/v1/completions": {"model": "tiny-lm", "prompt": "Return", "max_tokens": 2},
            "/v1/chat/completions": {
                "model": "tiny-lm",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 2,
            },
        }
        for route, body in bodies.items():
            response = await e.rest.post(route, json=body, headers={"x-request-timeout-ms": "0"})
            assert response.status_code == 400, (route, response.text)
            assert "x-request-timeout-ms header" in response.json()["error"]["message"]
