"""Multi-model serving through the real server: versions and `latest`, autoload with one
load per model, LRU unloading within a memory budget, in-flight protection, digests, and
models named by URI fetched into the node cache."""

from __future__ import annotations

import functools
import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from podserve.storage import artifacts_manifest, compute_digest
from tests.support.server import ServerProcess, infer_body, wait_until, write_model

ROOT = Path(__file__).resolve().parents[2]

SCALER = """
import numpy as np
from podserve.runtimes import ModelAPI

class Scaler(ModelAPI):
    def predict(self, batch):
        return {"y": batch["x"] * np.float32(SCALE)}
"""


def _versioned(root: Path) -> None:
    write_model(root, "m", runtime="custom", model_class="scaler:Scaler")
    for version, scale in (("1", 10), ("2", 100)):
        directory = root / "m" / version
        directory.mkdir()
        (directory / "scaler.py").write_text(SCALER.replace("SCALE", str(scale)))


def _y(response: httpx.Response) -> list[float]:
    assert response.status_code == 200, response.text
    return list(response.json()["outputs"][0]["data"])


def test_versions_latest_and_autoload(tmp_path: Path) -> None:
    _versioned(tmp_path)
    with ServerProcess("--model-repository", str(tmp_path), "--autoload") as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        metadata = server.get("/v2/models/m").json()
        assert metadata["versions"] == ["1", "2"]
        with server.client() as client:
            latest = client.post("/v2/models/m/infer", json=infer_body([1, 2, 3]))
            assert _y(latest) == [100.0, 200.0, 300.0]
            assert latest.json()["model_version"] == "2"
            alias = client.post("/v2/models/m/versions/latest/infer", json=infer_body([1, 1, 1]))
            assert _y(alias) == [100.0, 100.0, 100.0]
            # Only the latest version preloads; version 1 loads on its first request.
            assert server.get("/v2/models/m/versions/1/ready").status_code == 503
            old = client.post("/v2/models/m/versions/1/infer", json=infer_body([1, 2, 3]))
            assert _y(old) == [10.0, 20.0, 30.0]
            assert server.get("/v2/models/m/versions/1/ready").status_code == 200
            missing = client.post("/v2/models/m/versions/9/infer", json=infer_body([1, 2, 3]))
            assert missing.status_code == 404
            words = "Request for unknown model: 'm' version 9 is not found"
            assert missing.json()["error"] == words
            index = client.post("/v2/repository/index", json={}).json()
            assert [(e["name"], e["version"], e["state"]) for e in index] == [
                ("m", "1", "READY"),
                ("m", "2", "READY"),
            ]
        assert server.metric("podserve_model_autoloads_total", {"model": "m"}) == 1


@pytest.fixture
def budget_server(tmp_path: Path) -> Iterator[ServerProcess]:
    for name in ("a", "b", "c"):
        write_model(
            tmp_path,
            name,
            preload=False,
            memory_bytes=100,
            warmup=False,
            parameters={"delay_s": 0.0, "load_delay_s": 0.5},
        )
    write_model(
        tmp_path,
        "slow",
        preload=False,
        memory_bytes=100,
        warmup=False,
        parameters={"delay_s": 2.0},
        batching={"enabled": False},
    )
    write_model(tmp_path, "huge", preload=False, memory_bytes=1000, warmup=False)
    with ServerProcess(
        "--model-repository", str(tmp_path), "--autoload", "--memory-budget-bytes", "250"
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        yield server


def _states(server: ServerProcess) -> dict[str, str]:
    with server.client() as client:
        return {e["name"]: e["state"] for e in client.post("/v2/repository/index").json()}


def test_lru_unloads_the_least_recently_used_idle_model(budget_server: ServerProcess) -> None:
    server = budget_server
    with server.client() as client:
        # Concurrent first requests for one model share a single load.
        results: list[httpx.Response] = []

        def first_request() -> None:
            with server.client() as own:
                results.append(own.post("/v2/models/a/infer", json=infer_body([1, 2, 3])))

        threads = [threading.Thread(target=first_request) for _ in range(5)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        assert [r.status_code for r in results] == [200] * 5
        assert server.metric("podserve_model_load_duration_seconds_count", {"model": "a"}) == 1
        assert _y(client.post("/v2/models/b/infer", json=infer_body([1, 1, 1]))) == [2.0] * 3
        assert _y(client.post("/v2/models/a/infer", json=infer_body([1, 1, 1]))) == [2.0] * 3
        # a was used after b, so b is the least recently used: loading c unloads b.
        assert _y(client.post("/v2/models/c/infer", json=infer_body([1, 1, 1]))) == [2.0] * 3
        states = _states(server)
        assert states["a"] == "READY"
        assert states["c"] == "READY"
        assert states["b"] == "UNAVAILABLE"
        assert server.metric("podserve_model_evictions_total", {"model": "b"}) == 1
        # A model that can never fit is refused with a clear 503.
        huge = client.post("/v2/models/huge/infer", json=infer_body([1, 1, 1]))
        assert huge.status_code == 503
        assert "more than the whole memory budget of 250 bytes" in huge.json()["error"]


def test_a_model_with_requests_in_flight_is_never_unloaded(budget_server: ServerProcess) -> None:
    server = budget_server
    slow_results: list[httpx.Response] = []

    def slow_request() -> None:
        with server.client() as own:
            slow_results.append(own.post("/v2/models/slow/infer", json=infer_body([1, 1, 1])))

    with server.client() as client:
        assert _y(client.post("/v2/models/a/infer", json=infer_body([1, 1, 1]))) == [2.0] * 3
        slow_threads = [threading.Thread(target=slow_request) for _ in range(2)]
        for thread in slow_threads:
            thread.start()
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 2,
            what="slow model busy",
        )
        # slow (busy, loaded after a) stays; a (idle) is the one unloaded for b.
        assert _y(client.post("/v2/models/b/infer", json=infer_body([1, 1, 1]))) == [2.0] * 3
        states = _states(server)
        assert states["slow"] == "READY"
        assert states["a"] == "UNAVAILABLE"
        # Now slow is busy and b is idle: c evicts b; then with slow still busy and c
        # holding the rest, a third model that needs an unload of slow is refused.
        assert _y(client.post("/v2/models/c/infer", json=infer_body([1, 1, 1]))) == [2.0] * 3
        assert _states(server)["slow"] == "READY"
        for thread in slow_threads:
            thread.join(timeout=30)
        assert [r.status_code for r in slow_results] == [200, 200]


def test_digest_pin_refuses_a_mismatch_and_serves_a_match(tmp_path: Path) -> None:
    good = write_model(tmp_path / "repo", "good")
    bad = write_model(tmp_path / "repo", "bad")
    (good / "weights.bin").write_bytes(b"weights")
    (bad / "weights.bin").write_bytes(b"weights")
    # The pin inside model.yaml covers the artefacts (`podserve digest --artifacts`).
    digest = str(artifacts_manifest(good).digest)
    for directory, pin in ((good, digest), (bad, "sha256:" + "0" * 64)):
        body = (directory / "model.yaml").read_text()
        (directory / "model.yaml").write_text(body + f"digest: '{pin}'\n")
    with ServerProcess(
        "--model-repository", str(tmp_path / "repo"), "--cache-dir", str(tmp_path / "cache")
    ) as server:
        wait_until(lambda: server.get("/startup").json()["failed"] != {}, what="bad load")
        failed = server.get("/startup").json()["failed"]
        assert "bad" in failed
        assert "expected sha256:" + "0" * 64 in failed["bad"]
        assert "got sha256:" in failed["bad"]
        assert "good" not in failed


def test_model_named_by_http_uri_is_fetched_verified_and_served(tmp_path: Path) -> None:
    source = tmp_path / "www"
    source.mkdir()
    shutil.copy(ROOT / "examples/models/iris/model.skops", source / "model.skops")
    single = tmp_path / "single"
    single.mkdir()
    shutil.copy(source / "model.skops", single / "model.skops")
    digest = compute_digest(single)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(source))

    class QuietHandler(handler.func):  # type: ignore[name-defined,misc]
        def log_message(self, *args: object) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(source))
    )
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        uri = f"http://127.0.0.1:{httpd.server_address[1]}/model.skops@{digest}"
        with ServerProcess(
            "--model", f"remote={uri}:sklearn", "--cache-dir", str(tmp_path / "cache")
        ) as server:
            wait_until(lambda: server.get("/startup").status_code == 200, what="fetched and loaded")
            with server.client() as client:
                response = client.post(
                    "/v2/models/remote/infer",
                    json={
                        "inputs": [
                            {
                                "name": "features",
                                "shape": [1, 4],
                                "datatype": "FP64",
                                "data": [6.7, 3.0, 5.2, 2.3],
                            }
                        ]
                    },
                )
            assert response.status_code == 200, response.text
            assert response.json()["outputs"][0]["data"] == [2]
        assert any((tmp_path / "cache").rglob("model.skops"))
    finally:
        httpd.shutdown()
        httpd.server_close()
