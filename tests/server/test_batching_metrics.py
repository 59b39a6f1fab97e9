"""Dynamic batching and metrics through the real server: batches form while the worker is
busy, one bad item fails alone, and /metrics reflects all of it."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.support.server import ServerProcess, infer_body, wait_until, write_model


def _join(threads: list[threading.Thread], results: list[httpx.Response]) -> list[httpx.Response]:
    for thread in threads:
        thread.join(timeout=60)
    return results


def test_requests_queued_behind_a_busy_worker_run_as_one_batch(tmp_path: Path) -> None:
    write_model(
        tmp_path,
        "m",
        parameters={"delay_s": 1.0, "fail_value": 666},
        batching={"max_batch_size": 16},
        warmup=False,
    )
    with ServerProcess("--model-repository", str(tmp_path)) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        results: list[httpx.Response] = []

        def send(body: dict[str, object]) -> None:
            with server.client(timeout_s=60) as client:
                results.append(client.post("/v2/models/m/infer", json=body))

        blocker = threading.Thread(target=send, args=(infer_body([0, 0, 0]),), daemon=True)
        blocker.start()
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "m"}) == 1, what="busy"
        )
        bodies = [infer_body([i, i, i]) for i in range(1, 9)] + [infer_body([666, 1, 1])]
        threads = [threading.Thread(target=send, args=(b,), daemon=True) for b in bodies]
        for thread in threads:
            thread.start()
        # Queue depth rises while the worker is busy, and probes still answer.
        wait_until(
            lambda: server.metric("podserve_queue_depth", {"model": "m"}) == 9, what="9 queued"
        )
        assert server.get("/healthz").status_code == 200
        assert server.get("/ready").status_code == 200
        _join([blocker, *threads], results)
        ok = [r for r in results if r.status_code == 200]
        failed = [r for r in results if r.status_code != 200]
        # The bad item fails alone, with its own message; its 8 batch-mates succeed.
        assert len(ok) == 9
        assert len(failed) == 1
        assert failed[0].status_code == 500
        assert "refuses the value 666" in failed[0].json()["error"]
        assert sorted(r.json()["outputs"][0]["data"][0] for r in ok) == [2.0 * i for i in range(9)]
        families = {f.name: f for f in text_string_to_metric_families(server.get("/metrics").text)}
        batch = {
            s.name: s.value
            for s in families["podserve_batch_size"].samples
            if s.labels.get("model") == "m" and not s.name.endswith("_bucket")
        }
        # One lone call, then one batch of all nine; the failed batch was retried one by one.
        assert batch["podserve_batch_size_count"] == 2
        assert batch["podserve_batch_size_sum"] == 10
        requests = {
            (s.labels["code"]): s.value
            for s in families["podserve_requests"].samples
            if s.labels.get("model") == "m" and s.name == "podserve_requests_total"
        }
        assert requests == {"200": 9.0, "500": 1.0}
        assert server.metric("podserve_queue_depth", {"model": "m"}) == 0
        assert server.metric("podserve_inflight_requests", {"model": "m"}) == 0
        assert server.metric("podserve_ready") == 1
        assert server.metric("podserve_queue_wait_seconds_count", {"model": "m"}) == 10
