"""The repository extension's load and unload through a real server: a load sent while an
unload waits for a request in flight (httpx and tritonclient.grpc), and what a load or
unload request may carry, answered alike over REST (httpx) and gRPC (tritonclient)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import httpx
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess, infer_body, wait_until, write_model

WAITING = "waiting for the model's load or unload in progress"

# Its load and unload are written to `events` in its directory, so the test counts the
# instances made and closed; a request holding the value 1 runs until the test creates
# `go` there (the worker thread polls for it: nothing else reaches into that thread).
GATED = """
import time
from podserve.runtimes import ModelAPI

class Gated(ModelAPI):
    def load(self, context):
        self.where = context.directory
        self._note("load")

    def unload(self):
        self._note("unload")

    def _note(self, what):
        with open(self.where / "events", "a") as events:
            events.write(f"{what} {id(self)}\\n")

    def predict(self, batch):
        x = batch["x"]
        if (x == 1).any():
            (self.where / "predicting").write_text("")
            while not (self.where / "go").exists():
                time.sleep(0.005)
        return {"y": x}
"""


@pytest.fixture(scope="module")
def gated_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    directory = write_model(
        root, "gated", runtime="custom", model_class="gated:Gated", warmup=False
    )
    (directory / "gated.py").write_text(GATED)
    write_model(root, "spare", warmup=False, preload=False)
    return root


@pytest.fixture(scope="module")
def control_server(gated_dir: Path) -> Iterator[ServerProcess]:
    with ServerProcess(
        "--model-repository", str(gated_dir), "--model-control-mode", "explicit", grpc=True
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=60, what="ready")
        yield process


@pytest.fixture
def triton(control_server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{control_server.grpc_port}")


def _state(server: ServerProcess, name: str) -> str:
    with server.client() as client:
        index = client.post("/v2/repository/index", json={}).json()
    return str(next(e["state"] for e in index if e["name"] == name))


def _logged_waiting(server: ServerProcess, action: str) -> bool:
    return any(r.get("msg") == WAITING and r.get("action") == action for r in server.logs)


def test_a_load_sent_during_an_unload_waits_for_it_and_the_model_ends_loaded(
    control_server: ServerProcess, triton: grpcclient.InferenceServerClient, gated_dir: Path
) -> None:
    server, directory = control_server, gated_dir / "gated"
    with ThreadPoolExecutor(3) as pool, server.client(timeout_s=60) as client:
        inflight = pool.submit(
            client.post, "/v2/models/gated/infer", json=infer_body([1.0, 1.0, 1.0])
        )
        wait_until(lambda: (directory / "predicting").exists(), what="the request in flight")
        unload = pool.submit(client.post, "/v2/repository/models/gated/unload")
        wait_until(lambda: _state(server, "gated") == "UNLOADING", what="UNLOADING")
        load = pool.submit(triton.load_model, "gated")
        wait_until(
            lambda: load.done() or _logged_waiting(server, "load"),
            what="the load to wait for the unload, or to answer",
        )
        assert not load.done(), "the load answered while the unload still held the model"
        # New requests meanwhile are refused, retryably, as the model unloads.
        refused = client.post("/v2/models/gated/infer", json=infer_body([0.0, 0.0, 0.0]))
        assert refused.status_code == 503, refused.text
        assert "UNLOADING" in refused.json()["error"]

        (directory / "go").write_text("")
        assert inflight.result().status_code == 200  # the request in flight finished
        assert unload.result().status_code == 200
        load.result()  # raises if the load failed

        assert _state(server, "gated") == "READY"
        after = client.post("/v2/models/gated/infer", json=infer_body([0.0, 2.0, 3.0]))
        assert after.status_code == 200, after.text
        assert after.json()["outputs"][0]["data"] == [0.0, 2.0, 3.0]
    events = [line.split() for line in (directory / "events").read_text().splitlines()]
    loads = [instance for what, instance in events if what == "load"]
    unloads = [instance for what, instance in events if what == "unload"]
    # The first instance was closed by the unload; the second serves: none leaked.
    assert len(loads) == 2
    assert unloads == loads[:1]


# (action, body, REST status, the start of its error message)
REFUSED_BODIES: list[tuple[str, bytes, int, str]] = [
    ("load", b"not json", 400, "request body is not valid JSON"),
    ("load", b"[1, 2]", 400, "request body must be a JSON object, got array"),
    ("unload", b'"x"', 400, "request body must be a JSON object, got string"),
    ("load", b'{"parameters": [1]}', 400, "'parameters' must be a JSON object, got array"),
    (
        "load",
        json.dumps({"parameters": {"config": '{"max_batch_size": 1}'}}).encode(),
        400,
        "load parameters are not supported: config",
    ),
    (
        "load",
        json.dumps({"parameters": {"unload_dependents": True}}).encode(),
        400,
        "load parameters are not supported: unload_dependents",
    ),
    (
        "unload",
        json.dumps({"parameters": {"bogus": 1, "unload_dependents": False}}).encode(),
        400,
        "unload parameters are not supported: bogus",
    ),
    (
        "load",
        json.dumps({"parameters": {"file:1/model.onnx": "A" * 100_000}}).encode(),
        413,
        "a repository load request body is at most",
    ),
]


@pytest.mark.parametrize(("action", "body", "status", "message"), REFUSED_BODIES)
def test_rest_refuses_a_load_or_unload_body_it_cannot_honour(
    control_server: ServerProcess, action: str, body: bytes, status: int, message: str
) -> None:
    with control_server.client() as client:
        response = client.post(
            f"/v2/repository/models/spare/{action}",
            content=body,
            headers={"content-type": "application/json"},
        )
    assert response.status_code == status, response.text
    assert response.json()["error"].startswith(message)
    assert _state(control_server, "spare") == "UNAVAILABLE"  # nothing was done


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("load", b""),
        ("unload", b""),
        ("load", b"{}"),
        ("load", b'{"parameters": {}}'),
        ("unload", b'{"parameters": {"unload_dependents": true}}'),  # tritonclient's
    ],
)
def test_rest_takes_an_empty_body_or_the_parameters_podserve_honours(
    control_server: ServerProcess, action: str, body: bytes
) -> None:
    with control_server.client() as client:
        response = client.post(f"/v2/repository/models/spare/{action}", content=body)
    assert response.status_code == 200, response.text
    assert _state(control_server, "spare") == ("READY" if action == "load" else "UNAVAILABLE")


def _grpc_refusal(call: Any) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as refused:
        call()
    return str(refused.value.status()), str(refused.value.message())


def _rest_refusal(server: ServerProcess, action: str, parameters: dict[str, Any]) -> str:
    with server.client() as client:
        response = client.post(
            f"/v2/repository/models/spare/{action}", json={"parameters": parameters}
        )
    assert response.status_code == 400, response.text
    return str(response.json()["error"])


def test_grpc_and_rest_answer_the_same_parameters_alike(
    control_server: ServerProcess, triton: grpcclient.InferenceServerClient
) -> None:
    config = '{"max_batch_size": 1}'
    status, message = _grpc_refusal(lambda: triton.load_model("spare", config=config))
    assert status == "StatusCode.INVALID_ARGUMENT"
    assert message == _rest_refusal(control_server, "load", {"config": config})

    # tritonclient has no way to send another unload parameter: the generated stub does.
    stub = service_pb2_grpc.GRPCInferenceServiceStub(
        grpc.insecure_channel(f"127.0.0.1:{control_server.grpc_port}")
    )
    request = service_pb2.RepositoryModelUnloadRequest(model_name="spare")
    request.parameters["bogus"].int64_param = 1
    with pytest.raises(grpc.RpcError) as bogus:
        stub.RepositoryModelUnload(request, timeout=30)
    assert bogus.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert bogus.value.details() == _rest_refusal(control_server, "unload", {"bogus": 1})

    # What tritonclient sends by default is taken by both.
    triton.load_model("spare")
    assert triton.is_model_ready("spare")
    triton.unload_model("spare", unload_dependents=True)
    assert _state(control_server, "spare") == "UNAVAILABLE"
    with httpx.Client(base_url=control_server.url, timeout=30) as client:
        assert client.post("/v2/repository/models/spare/load", json={}).status_code == 200
        unload = {"parameters": {"unload_dependents": True}}
        assert client.post("/v2/repository/models/spare/unload", json=unload).status_code == 200
