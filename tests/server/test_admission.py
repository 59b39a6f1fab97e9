"""Admission (DESIGN.md §3) against a real server: bounded queue, body limit, malformed
input, unknown model, deadlines, disconnects, readiness watermarks."""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import httpx
import orjson

from tests.support.server import ServerProcess, infer_body, wait_until, write_model


def _background(
    server: ServerProcess, body: dict[str, object], sink: list[httpx.Response]
) -> threading.Thread:
    def run() -> None:
        with server.client(timeout_s=60) as client:
            sink.append(client.post("/v2/models/slow/infer", json=body))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _slow_server(tmp_path: Path, *extra: str, delay_s: float = 1.0, **config: Any) -> ServerProcess:
    write_model(
        tmp_path,
        "slow",
        parameters={"delay_s": delay_s},
        batching={"enabled": False},
        warmup=False,
        **config,
    )
    return ServerProcess("--model-repository", str(tmp_path), *extra)


def test_full_queue_rejects_fast_with_503_and_retry_after(tmp_path: Path) -> None:
    with _slow_server(tmp_path, "--max-queue", "2") as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        done: list[httpx.Response] = []
        threads = [_background(server, infer_body([i, i, i]), done) for i in range(3)]
        wait_until(
            lambda: server.metric("podserve_queue_depth", {"model": "slow"}) == 2, what="queue full"
        )
        with server.client() as client:
            rejected = client.post("/v2/models/slow/infer", json=infer_body([9, 9, 9]))
        assert rejected.status_code == 503
        assert int(rejected.headers["retry-after"]) >= 1
        assert "queue is full (2 waiting)" in rejected.json()["error"]
        assert (
            server.metric(
                "podserve_rejected_requests_total", {"model": "slow", "reason": "queue_full"}
            )
            == 1
        )
        for thread in threads:
            thread.join(timeout=30)
        assert [r.status_code for r in done] == [200, 200, 200]


def test_bad_requests_get_clear_json_errors(tmp_path: Path) -> None:
    write_model(tmp_path, "m", batching={"max_batch_size": 4})
    with ServerProcess("--model-repository", str(tmp_path), "--max-body-bytes", "4096") as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        with server.client() as client:
            cases = [
                (client.post("/v2/models/m/infer", content=b"{not json"), 400, "JSON"),
                (
                    client.post(
                        "/v2/models/m/infer",
                        json={
                            "inputs": [
                                {
                                    "name": "x",
                                    "shape": [1, 3],
                                    "datatype": "FP99",
                                    "data": [1, 2, 3],
                                }
                            ]
                        },
                    ),
                    400,
                    "FP99",
                ),
                (
                    client.post(
                        "/v2/models/m/infer",
                        json={
                            "inputs": [
                                {
                                    "name": "z",
                                    "shape": [1, 3],
                                    "datatype": "FP32",
                                    "data": [1, 2, 3],
                                }
                            ]
                        },
                    ),
                    400,
                    "missing input 'x'",
                ),
                (
                    client.post(
                        "/v2/models/m/infer",
                        json={
                            "inputs": [
                                {"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}
                            ]
                        },
                    ),
                    400,
                    "expected [-1, 3]",
                ),
                (
                    client.post(
                        "/v2/models/m/infer",
                        json={
                            "inputs": [
                                {
                                    "name": "x",
                                    "shape": [1, 3],
                                    "datatype": "INT32",
                                    "data": [1, 2, 3],
                                }
                            ]
                        },
                    ),
                    400,
                    "datatype INT32, expected FP32",
                ),
                (
                    client.post("/v2/models/m/infer", json=infer_body([1.0] * 15)),
                    400,
                    "max_batch_size=4",
                ),
                (
                    client.post("/v2/models/nope/infer", json=infer_body([1, 2, 3])),
                    404,
                    "unknown model: 'nope'",
                ),
                (client.get("/v2/models/nope"), 404, "unknown model"),
                (
                    client.post("/v2/models/m/infer", content=b"x" * 5000),
                    413,
                    "max_body_bytes=4096",
                ),
                (client.get("/v2/models/m/infer"), 405, "method GET not allowed"),
                (client.get("/no/such/path"), 404, "no route"),
            ]
            for response, status, fragment in cases:
                assert response.status_code == status, (response.status_code, response.text)
                assert response.headers["content-type"] == "application/json"
                assert fragment in orjson.loads(response.content)["error"], response.text
            # The server is unharmed.
            assert client.post("/v2/models/m/infer", json=infer_body([1, 2, 3])).status_code == 200


def test_deadline_passing_in_the_queue_is_never_computed(tmp_path: Path) -> None:
    # The first request holds the only instance for 4 s, far longer than the three
    # requests below take to be refused even on a loaded machine (the deterministic,
    # gated version of this is tests/middle/test_scenarios.py).
    with _slow_server(tmp_path, delay_s=4.0) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        done: list[httpx.Response] = []
        first = _background(server, infer_body([1, 1, 1]), done)
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 1,
            what="first running",
        )
        with server.client() as client:
            by_parameter = client.post(
                "/v2/models/slow/infer",
                json=infer_body([2, 2, 2], parameters={"timeout": 200_000}),  # microseconds
            )
            by_header = client.post(
                "/v2/models/slow/infer",
                json=infer_body([3, 3, 3]),
                headers={"x-request-timeout-ms": "200"},
            )
            bad = client.post(
                "/v2/models/slow/infer",
                json=infer_body([4, 4, 4]),
                headers={"x-request-timeout-ms": "soon"},
            )
        assert by_parameter.status_code == 504, by_parameter.text
        assert "not computed" in by_parameter.json()["error"]
        assert by_header.status_code == 504
        assert bad.status_code == 400
        assert "x-request-timeout-ms" in bad.json()["error"]
        first.join(timeout=30)
        assert done[0].status_code == 200
        # Only the first request ever reached the model.
        assert server.metric("podserve_batch_size_count", {"model": "slow"}) == 1
        assert (
            server.metric(
                "podserve_rejected_requests_total", {"model": "slow", "reason": "deadline"}
            )
            == 2
        )


def test_disconnected_client_leaves_the_queue(tmp_path: Path) -> None:
    with _slow_server(tmp_path, delay_s=1.5) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        done: list[httpx.Response] = []
        first = _background(server, infer_body([1, 1, 1]), done)
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 1,
            what="first running",
        )
        body = orjson.dumps(infer_body([5, 5, 5]))
        with socket.create_connection(("127.0.0.1", server.http_port)) as raw:
            raw.sendall(
                b"POST /v2/models/slow/infer HTTP/1.1\r\nhost: x\r\n"
                + b"content-type: application/json\r\n"
                + f"content-length: {len(body)}\r\n\r\n".encode()
                + body
            )
            wait_until(
                lambda: server.metric("podserve_queue_depth", {"model": "slow"}) == 1,
                what="second request queued",
            )
        # The socket is closed: the queued request must leave the queue at once.
        wait_until(
            lambda: server.metric("podserve_queue_depth", {"model": "slow"}) == 0,
            timeout_s=5,
            what="cancelled request to leave the queue",
        )
        first.join(timeout=30)
        assert server.metric("podserve_batch_size_count", {"model": "slow"}) == 1
        assert server.metric("podserve_requests_total", {"model": "slow", "code": "499"}) == 1


def test_readiness_fails_above_high_watermark_and_recovers_below_low(tmp_path: Path) -> None:
    with _slow_server(
        tmp_path,
        "--max-queue",
        "10",
        "--ready-high-watermark",
        "0.5",
        "--ready-low-watermark",
        "0.2",
        delay_s=0.5,
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        done: list[httpx.Response] = []
        threads = [_background(server, infer_body([i, i, i]), done) for i in range(8)]
        wait_until(lambda: server.get("/ready").status_code == 503, what="readiness to fail")
        assert any("high watermark" in r for r in server.get("/ready").json()["reasons"])
        assert server.get("/healthz").status_code == 200
        # Hysteresis: still not ready at a depth between the watermarks.
        wait_until(
            lambda: server.metric("podserve_queue_depth", {"model": "slow"}) in (3, 4),
            what="queue between watermarks",
        )
        if server.metric("podserve_queue_depth", {"model": "slow"}) >= 2:
            assert server.get("/ready").status_code == 503
        wait_until(lambda: server.get("/ready").status_code == 200, timeout_s=30, what="recovery")
        for thread in threads:
            thread.join(timeout=30)
        assert len(done) == 8
        assert all(r.status_code == 200 for r in done)
