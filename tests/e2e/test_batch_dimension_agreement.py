"""A batching model's inputs share their batch (first) dimension, and a client's requested
output names are checked before the model runs: against the real server, with httpx on
REST and Triton's gRPC client on gRPC.

Inputs whose batch sizes differed used to be accepted (a broadcast answer) and, batched
with well-formed requests, handed one client's rows to another's answer. A million
requested output names used to run the model and come back as a 15 MB error."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpc_aio
import yaml
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess, wait_until, write_model

ROOT = Path(__file__).resolve().parents[2]
SPEC = {"datatype": "INT32", "shape": [-1, 16]}
MISMATCH = (
    "input 'INPUT1' has batch size 2 but input 'INPUT0' has 1: the batch size does not match "
    "other inputs; every input of model 'simple' must share its first (batch) dimension"
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """Triton's `simple` (OUTPUT0 = INPUT0 + INPUT1), holding each batch open 100 ms so the
    requests sent together share one model call; and a model that declares no outputs."""
    models = tmp_path_factory.mktemp("models")
    simple = models / "simple"
    simple.mkdir()
    shutil.copy(ROOT / "examples" / "models" / "simple" / "model.py", simple / "model.py")
    config = {
        "name": "simple",
        "runtime": "custom",
        "model_class": "model:SimpleModel",
        "inputs": [{"name": "INPUT0", **SPEC}, {"name": "INPUT1", **SPEC}],
        "outputs": [{"name": "OUTPUT0", **SPEC}, {"name": "OUTPUT1", **SPEC}],
        "batching": {"max_batch_size": 16, "max_queue_delay_ms": 100, "work_conserving": False},
    }
    (simple / "model.yaml").write_text(yaml.safe_dump(config))
    undeclared = write_model(models, "undeclared", outputs=[])
    with ServerProcess(
        "--model", f"simple={simple}", "--model", f"undeclared={undeclared}", grpc=True
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=60, what="ready")
        yield process


def _input(name: str, rows: int, value: int) -> dict[str, Any]:
    return {"name": name, "datatype": "INT32", "shape": [rows, 16], "data": [value] * (16 * rows)}


def _body(rows0: int, rows1: int, value: int, **extra: Any) -> dict[str, Any]:
    return {"inputs": [_input("INPUT0", rows0, value), _input("INPUT1", rows1, value)], **extra}


def _grpc_inputs(rows0: int, rows1: int, value: int) -> list[grpcclient.InferInput]:
    inputs = []
    for name, rows in (("INPUT0", rows0), ("INPUT1", rows1)):
        tensor = grpcclient.InferInput(name, [rows, 16], "INT32")
        tensor.set_data_from_numpy(np.full((rows, 16), value, dtype=np.int32))
        inputs.append(tensor)
    return inputs


def _executions(server: ServerProcess, model: str) -> int:
    (stats,) = server.get(f"/v2/models/{model}/stats").json()["model_stats"]
    return int(stats["execution_count"])


def test_rest_refuses_inputs_whose_batch_sizes_differ(server: ServerProcess) -> None:
    before = _executions(server, "simple")
    with server.client() as client:
        response = client.post("/v2/models/simple/infer", json=_body(1, 2, 5))
    assert response.status_code == 400
    assert response.json() == {"error": MISMATCH}
    assert _executions(server, "simple") == before  # refused before it was queued


def test_grpc_refuses_inputs_whose_batch_sizes_differ(server: ServerProcess) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", _grpc_inputs(1, 2, 5))
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert info.value.message() == MISMATCH
    answer = client.infer("simple", _grpc_inputs(2, 2, 5))
    assert answer.as_numpy("OUTPUT0").tolist() == [[10] * 16] * 2


async def test_victims_are_answered_exactly_while_mismatched_neighbours_are_refused(
    server: ServerProcess,
) -> None:
    """The corruption scenario: A (2+1 rows) and D (1+2) sent with well-formed C (1+1)
    and E (2+2), on both edges at once, so they would share model calls. A's and D's rows
    once shifted into C's answer (C got 7100 instead of 200)."""
    victims: list[tuple[str, int, int, Any]] = []
    refusals: list[Any] = []
    async with (
        httpx.AsyncClient(base_url=server.url, timeout=30) as rest,
        grpc_aio.InferenceServerClient(f"127.0.0.1:{server.grpc_port}") as grpc,
    ):

        async def rest_call(rows0: int, rows1: int, value: int) -> httpx.Response:
            return await rest.post("/v2/models/simple/infer", json=_body(rows0, rows1, value))

        async def grpc_call(rows0: int, rows1: int, value: int) -> Any:
            try:
                return await grpc.infer("simple", _grpc_inputs(rows0, rows1, value))
            except InferenceServerException as exc:
                return exc

        for round_ in range(12):
            calls = [
                rest_call(2, 1, 1000),  # A
                rest_call(1, 1, 100 + round_),  # C
                grpc_call(1, 2, 7000),  # D
                grpc_call(1, 1, 300 + round_),  # C
                grpc_call(2, 1, 1000),  # A
                rest_call(2, 2, 50 + round_),  # E
                rest_call(1, 2, 7000),  # D
                grpc_call(2, 2, 70 + round_),  # E
            ]
            answers = await asyncio.gather(*calls)
            refusals += [answers[i] for i in (0, 2, 4, 6)]
            victims += [
                ("rest", 1, 100 + round_, answers[1]),
                ("grpc", 1, 300 + round_, answers[3]),
                ("rest", 2, 50 + round_, answers[5]),
                ("grpc", 2, 70 + round_, answers[7]),
            ]

    for refusal in refusals:
        if isinstance(refusal, httpx.Response):
            assert refusal.status_code == 400, refusal.text
            assert "batch size does not match other inputs" in refusal.json()["error"]
        else:
            assert isinstance(refusal, InferenceServerException), "a mismatched request ran"
            assert refusal.status() == "StatusCode.INVALID_ARGUMENT"
            assert "batch size does not match other inputs" in str(refusal.message())
    for edge, rows, value, answer in victims:
        if edge == "rest":
            assert answer.status_code == 200, answer.text
            outputs = {o["name"]: o["data"] for o in answer.json()["outputs"]}
            assert outputs == {"OUTPUT0": [2 * value] * 16 * rows, "OUTPUT1": [0] * 16 * rows}
        else:
            assert not isinstance(answer, InferenceServerException), answer
            expected = np.full((rows, 16), 2 * value, dtype=np.int32)
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT0"), expected)
            np.testing.assert_array_equal(answer.as_numpy("OUTPUT1"), np.zeros_like(expected))
    # The well-formed requests did share model calls (a batch of more than 2 rows holds
    # more than one request): the scenario ran batched, not one request at a time.
    (stats,) = server.get("/v2/models/simple/stats").json()["model_stats"]
    assert max(int(b["batch_size"]) for b in stats["batch_stats"]) > 2


def test_rest_refuses_many_output_names_before_the_model_runs(server: ServerProcess) -> None:
    before = _executions(server, "simple")
    outputs = [{"name": f"label{i}"} for i in range(100_000)]
    with server.client() as client:
        response = client.post("/v2/models/simple/infer", json=_body(1, 1, 5, outputs=outputs))
    assert response.status_code == 400
    assert response.json() == {
        "error": "100000 outputs requested; model 'simple' has 2 (['OUTPUT0', 'OUTPUT1']) "
        "and each may be requested once"
    }
    assert _executions(server, "simple") == before
    with server.client() as client:
        unknown = client.post(
            "/v2/models/simple/infer", json=_body(1, 1, 5, outputs=[{"name": "OUTPUT9"}])
        )
        one = client.post(
            "/v2/models/simple/infer", json=_body(1, 1, 5, outputs=[{"name": "OUTPUT1"}])
        )
    assert unknown.status_code == 400
    assert unknown.json()["error"].startswith("unknown requested output(s) ['OUTPUT9']")
    assert [o["name"] for o in one.json()["outputs"]] == ["OUTPUT1"]
    assert _executions(server, "simple") == before + 1


def test_grpc_refuses_many_and_repeated_output_names_before_the_model_runs(
    server: ServerProcess,
) -> None:
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    before = _executions(server, "simple")
    many = [grpcclient.InferRequestedOutput(f"label{i}") for i in range(10_000)]
    with pytest.raises(InferenceServerException) as info:
        client.infer("simple", _grpc_inputs(1, 1, 5), outputs=many)
    assert info.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert str(info.value.message()).startswith("10000 outputs requested; model 'simple' has 2")
    twice = [grpcclient.InferRequestedOutput("OUTPUT0") for _ in range(2)]
    with pytest.raises(InferenceServerException) as repeated:
        client.infer("simple", _grpc_inputs(1, 1, 5), outputs=twice)
    assert repeated.value.status() == "StatusCode.INVALID_ARGUMENT"
    assert repeated.value.message() == "output 'OUTPUT0' is requested more than once"
    assert _executions(server, "simple") == before


def test_a_model_without_declared_outputs_quotes_a_few_unknown_names(
    server: ServerProcess,
) -> None:
    """Nothing declared to check before it runs; the refusal still stays short."""
    body = {
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}],
        "outputs": [{"name": "y"}, *({"name": f"nope{i}"} for i in range(10_000))],
    }
    with server.client() as client:
        response = client.post("/v2/models/undeclared/infer", json=body)
    assert response.status_code == 400
    assert response.json() == {
        "error": "10001 outputs requested; model 'undeclared' has 1 (['y']) and each may be "
        "requested once"
    }
