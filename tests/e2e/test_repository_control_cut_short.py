"""A repository load or unload whose caller stops waiting (here a gRPC deadline, through
tritonclient) still finishes, and the model is then served as that operation left it: a
load cut short ends with the model served, not refused as "unloaded" by an earlier
unload; an unload cut short ends with the model refused as unloaded (404), not as merely
not ready (503, which clients retry)."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess, infer_body, wait_until, write_model

CALLER_LEFT = "the caller of a model load or unload left; it goes on"
# Long enough for the call to reach the server, far shorter than a load the test holds.
DEADLINE_S = 2.0

# Its load runs until the test creates `load-go` in its directory, and uses it up, so the
# next load is held again; a request holding the value 1 runs until the test creates
# `predict-go`. (The threads poll for the files: nothing else reaches into them.)
HELD = """
import time
from podserve.runtimes import ModelAPI

class Held(ModelAPI):
    def load(self, context):
        self.where = context.directory
        go = self.where / "load-go"
        (self.where / "loading").write_text("")
        while not go.exists():
            time.sleep(0.005)
        go.unlink()

    def predict(self, batch):
        x = batch["x"]
        if (x == 1).any():
            (self.where / "predicting").write_text("")
            while not (self.where / "predict-go").exists():
                time.sleep(0.005)
        return {"y": x}
"""


@pytest.fixture(scope="module")
def held_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("models")
    directory = write_model(
        root, "held", runtime="custom", model_class="held:Held", warmup=False, preload=False
    )
    (directory / "held.py").write_text(HELD)
    return directory


@pytest.fixture(scope="module")
def held_server(held_dir: Path) -> Iterator[ServerProcess]:
    with ServerProcess(
        "--model-repository",
        str(held_dir.parent),
        "--model-control-mode",
        "explicit",
        grpc=True,
    ) as process:
        wait_until(lambda: process.get("/ready").status_code == 200, timeout_s=60, what="ready")
        yield process


@pytest.fixture
def triton(held_server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{held_server.grpc_port}")


def _state(server: ServerProcess) -> str:
    with server.client() as client:
        index = client.post("/v2/repository/index", json={}).json()
    return str(next(e["state"] for e in index if e["name"] == "held"))


def _infer(client: httpx.Client, value: float) -> httpx.Response:
    return client.post("/v2/models/held/infer", json=infer_body([value, 2.0, 3.0]))


def _caller_left(server: ServerProcess, action: str) -> None:
    """Wait for the server's word that the call was cut and the operation goes on."""
    server.wait_log(lambda r: r.get("msg") == CALLER_LEFT and r.get("action") == action)


def test_a_load_past_its_grpc_deadline_ends_with_the_model_served(
    held_server: ServerProcess, triton: grpcclient.InferenceServerClient, held_dir: Path
) -> None:
    server = held_server
    with server.client() as client:
        triton.unload_model("held")  # on purpose: its requests are now refused as unloaded
        refused = _infer(client, 0.0)
        assert refused.status_code == 404, refused.text
        assert "was unloaded" in refused.json()["error"]

        with pytest.raises(InferenceServerException) as cut:
            triton.load_model("held", client_timeout=DEADLINE_S)
        assert cut.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        _caller_left(server, "load")
        assert (held_dir / "loading").exists()
        assert _state(server) == "LOADING"

        (held_dir / "load-go").write_text("")
        wait_until(lambda: _state(server) == "READY", what="the load to finish")
        served = _infer(client, 0.0)
        assert served.status_code == 200, served.text
        assert served.json()["outputs"][0]["data"] == [0.0, 2.0, 3.0]
        assert triton.is_model_ready("held")


def test_an_unload_past_its_grpc_deadline_ends_with_the_model_refused_as_unloaded(
    held_server: ServerProcess, triton: grpcclient.InferenceServerClient, held_dir: Path
) -> None:
    server = held_server
    (held_dir / "load-go").write_text("")
    triton.load_model("held")
    with ThreadPoolExecutor(1) as pool, server.client(timeout_s=60) as client:
        # A request in flight: the unload waits for it past the unload call's deadline.
        inflight = pool.submit(_infer, client, 1.0)
        wait_until(lambda: (held_dir / "predicting").exists(), what="the request in flight")
        with pytest.raises(InferenceServerException) as cut:
            triton.unload_model("held", client_timeout=DEADLINE_S)
        assert cut.value.status() == "StatusCode.DEADLINE_EXCEEDED"
        _caller_left(server, "unload")
        assert _state(server) == "UNLOADING"

        (held_dir / "predict-go").write_text("")
        assert inflight.result().status_code == 200  # the request in flight finished
        wait_until(lambda: _state(server) == "UNAVAILABLE", what="the unload to finish")
        refused = _infer(client, 0.0)
        # Not 503 "UNAVAILABLE", which clients and load balancers retry.
        assert refused.status_code == 404, refused.text
        assert "was unloaded" in refused.json()["error"]
        assert not triton.is_model_ready("held")
