"""Probes mean what DESIGN.md §2 says, against a real server process."""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess, infer_body, wait_until, write_model

LIVE = ("/healthz", "/livez", "/v2/health/live", "/v1/health/live")
READY = ("/ready", "/readyz", "/v2/health/ready", "/v1/health/ready")


def test_probes_answer_while_models_load_then_all_pass(tmp_path: Path) -> None:
    write_model(tmp_path, "slow", parameters={"load_delay_s": 3})
    with ServerProcess("--model-repository", str(tmp_path)) as server:
        startup = server.get("/startup")
        assert startup.status_code == 503
        body = startup.json()
        assert body["state"] in {"LOADING", "STARTING"}
        assert body["progress"] == "0/1"
        assert body["loading"] == ["slow"] or body["state"] == "STARTING"
        for path in LIVE:
            assert server.get(path).status_code == 200, path
        for path in READY:
            response = server.get(path)
            assert response.status_code == 503, path
            assert "models are still loading" in response.json()["reasons"]
        assert server.get("/v2/models/slow/ready").status_code == 503
        wait_until(lambda: server.get("/startup").status_code == 200, what="startup")
        for path in (*LIVE, *READY, "/v2/models/slow/ready", "/v2/models/slow/versions/1/ready"):
            assert server.get(path).status_code == 200, path
        assert server.get("/v2/models/nope/ready").status_code == 404
        loaded = server.wait_log(lambda r: r.get("msg") == "model ready")
        assert loaded["load_seconds"] >= 3
        assert loaded["recommended_startup_budget_s"] == pytest.approx(
            loaded["load_seconds"] * 1.5, abs=0.1
        )
        assert server.metric("podserve_model_load_seconds", {"model": "slow"}) >= 3


def test_failed_load_leaves_server_not_ready_with_the_error(tmp_path: Path) -> None:
    write_model(tmp_path, "good")
    write_model(tmp_path, "broken", parameters={"load_error": "weights file is truncated"})
    with ServerProcess("--model-repository", str(tmp_path)) as server:
        wait_until(lambda: server.get("/startup").json()["failed"] != {}, what="load failure")
        ready = server.get("/ready")
        assert ready.status_code == 503
        assert any("weights file is truncated" in r for r in ready.json()["reasons"])
        startup = server.get("/startup")
        assert startup.status_code == 503
        assert "weights file is truncated" in startup.json()["failed"]["broken"]
        assert server.get("/healthz").status_code == 200  # a failed load is no reason to restart
        logged = server.wait_log(lambda r: r.get("msg") == "model failed to load")
        assert logged["model"] == "broken"
        assert "truncated" in logged["error"]
        # The healthy model still serves.
        with server.client() as client:
            ok = client.post("/v2/models/good/infer", json=infer_body([1, 2, 3]))
            assert ok.status_code == 200
            failed = client.post("/v2/models/broken/infer", json=infer_body([1, 2, 3]))
            assert failed.status_code == 503
            assert "truncated" in failed.json()["error"]


def test_watchdog_fails_liveness_on_a_hung_model_but_not_on_a_slow_one(tmp_path: Path) -> None:
    write_model(
        tmp_path,
        "wedge",
        parameters={"hang_value": 13, "delay_s": 0.4},
        limits={"max_batch_time_s": 1.5},
        batching={"enabled": False},
    )
    with ServerProcess("--model-repository", str(tmp_path)) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        with server.client() as client:
            # Slow but progressing: every call takes 0.4 s, well within 1.5 s.
            for _ in range(5):
                assert (
                    client.post("/v2/models/wedge/infer", json=infer_body([1, 2, 3])).status_code
                    == 200
                )
                assert server.get("/healthz").status_code == 200

        def hang() -> None:
            # The server is killed while this waits, which ends the request with an error.
            with server.client(timeout_s=60) as client, contextlib.suppress(httpx.HTTPError):
                client.post("/v2/models/wedge/infer", json=infer_body([13, 13, 13]))

        threading.Thread(target=hang, daemon=True).start()
        wait_until(
            lambda: server.get("/healthz").status_code == 503, timeout_s=10, what="liveness to fail"
        )
        reasons = server.get("/healthz").json()["reasons"]
        assert any("wedged" in r and "max_batch_time_s=1.5" in r for r in reasons)


def test_request_id_is_accepted_echoed_and_logged(tmp_path: Path) -> None:
    write_model(tmp_path, "m")
    with ServerProcess("--model-repository", str(tmp_path)) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        with server.client() as client:
            response = client.post(
                "/v2/models/m/infer",
                json=infer_body([1, 2, 3]),
                headers={"x-request-id": "abc-123"},
            )
            assert response.headers["x-request-id"] == "abc-123"
            generated = client.post("/v2/models/m/infer", json=infer_body([1, 2, 3]))
            assert len(generated.headers["x-request-id"]) >= 8
        line = server.wait_log(
            lambda r: r.get("msg") == "request" and r.get("request_id") == "abc-123"
        )
        assert line["model"] == "m"
        assert line["status"] == 200
        assert line["duration_ms"] >= 0
        assert line["level"] == "info"
        assert "ts" in line
