"""SIGTERM drain against a real server process (DESIGN.md §2)."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.server import ServerProcess, infer_body, wait_until, write_model


def _fire(
    server: ServerProcess, values: list[float], results: list[httpx.Response | BaseException]
) -> threading.Thread:
    def run() -> None:
        try:
            with server.client(timeout_s=60) as client:
                results.append(client.post("/v2/models/slow/infer", json=infer_body(values)))
        except BaseException as exc:
            results.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_sigterm_finishes_running_and_queued_requests_then_exits_zero(tmp_path: Path) -> None:
    running, queued = 2, 3
    write_model(
        tmp_path,
        "slow",
        instance_count=running,
        parameters={"delay_s": 1.5},
        batching={"enabled": False},
    )
    with ServerProcess("--model-repository", str(tmp_path), "--drain-timeout-s", "60") as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        results: list[httpx.Response | BaseException] = []
        threads = [_fire(server, [i, i + 1, i + 2], results) for i in range(running + queued)]
        wait_until(
            lambda: (
                server.metric("podserve_queue_depth", {"model": "slow"}) == queued
                and server.metric("podserve_inflight_requests", {"model": "slow"})
                == running + queued
            ),
            what="2 running and 3 queued",
        )
        server.send_signal(signal.SIGTERM)
        server.wait_log(lambda r: r.get("msg") == "SIGTERM: draining")
        ready = server.get("/ready")
        assert ready.status_code == 503
        assert "draining after SIGTERM" in ready.json()["reasons"]
        assert server.get("/healthz").status_code == 200
        with server.client() as client:
            refused = client.post("/v2/models/slow/infer", json=infer_body([1, 2, 3]))
        assert refused.status_code == 503
        assert refused.headers["connection"] == "close"
        assert int(refused.headers["retry-after"]) >= 1
        assert "draining" in refused.json()["error"]
        for thread in threads:
            thread.join(timeout=60)
        assert len(results) == running + queued
        for result in results:
            assert isinstance(result, httpx.Response), result
            assert result.status_code == 200, result.text
        outputs = sorted(
            r.json()["outputs"][0]["data"] for r in results if isinstance(r, httpx.Response)
        )
        assert outputs == [[2.0 * i, 2.0 * (i + 1), 2.0 * (i + 2)] for i in range(running + queued)]
        assert server.wait_exit() == 0
        server.wait_log(lambda r: r.get("msg") == "drain complete; exiting")


def test_drain_timeout_cuts_and_reports_how_many(tmp_path: Path) -> None:
    write_model(
        tmp_path,
        "slow",
        parameters={"delay_s": 120},
        batching={"enabled": False},
        limits={"max_batch_time_s": 600},
        warmup=False,
    )
    with ServerProcess("--model-repository", str(tmp_path), "--drain-timeout-s", "1") as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        results: list[httpx.Response | BaseException] = []
        _fire(server, [1, 2, 3], results)
        _fire(server, [4, 5, 6], results)
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 2,
            what="two in flight",
        )
        server.send_signal(signal.SIGTERM)
        assert server.wait_exit(timeout_s=30) == 1
        cut = server.wait_log(
            lambda r: r.get("msg") == "drain timeout expired; cutting in-flight requests"
        )
        assert cut["cut_requests"] == 2


def test_second_signal_exits_at_once(tmp_path: Path) -> None:
    write_model(
        tmp_path,
        "slow",
        parameters={"delay_s": 120},
        batching={"enabled": False},
        limits={"max_batch_time_s": 600},
        warmup=False,
    )
    with ServerProcess("--model-repository", str(tmp_path), "--drain-timeout-s", "300") as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        results: list[httpx.Response | BaseException] = []
        _fire(server, [1, 2, 3], results)
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 1,
            what="one in flight",
        )
        server.send_signal(signal.SIGTERM)
        server.wait_log(lambda r: r.get("msg") == "SIGTERM: draining")
        assert server.get("/ready").status_code == 503
        server.send_signal(signal.SIGINT)
        assert server.wait_exit(timeout_s=15) == 1
        forced = server.wait_log(lambda r: r.get("msg") == "second signal or SIGINT: exiting now")
        assert forced["cut_requests"] == 1


def test_drain_applies_to_grpc(tmp_path: Path) -> None:
    import numpy as np
    import tritonclient.grpc as grpcclient
    from tritonclient.utils import InferenceServerException

    write_model(
        tmp_path, "slow", parameters={"delay_s": 1.5}, batching={"enabled": False}, warmup=False
    )
    with ServerProcess(
        "--model-repository", str(tmp_path), "--drain-timeout-s", "60", grpc=True
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        target = f"127.0.0.1:{server.grpc_port}"

        def request(value: float) -> grpcclient.InferInput:
            x = grpcclient.InferInput("x", [1, 3], "FP32")
            x.set_data_from_numpy(np.full((1, 3), value, dtype=np.float32))
            return x

        results: list[object] = []

        def run() -> None:
            client = grpcclient.InferenceServerClient(target)
            try:
                results.append(client.infer("slow", [request(4.0)]).as_numpy("y"))
            except InferenceServerException as exc:
                results.append(exc)
            finally:
                client.close()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 1,
            what="one gRPC request in flight",
        )
        server.send_signal(signal.SIGTERM)
        server.wait_log(lambda r: r.get("msg") == "SIGTERM: draining")
        client = grpcclient.InferenceServerClient(target)
        try:
            assert not client.is_server_ready()
            assert client.is_server_live()
            with pytest.raises(InferenceServerException, match="draining") as refused:
                client.infer("slow", [request(1.0)])
            assert refused.value.status() == "StatusCode.UNAVAILABLE"
        finally:
            client.close()
        thread.join(timeout=30)
        assert len(results) == 1
        output = results[0]
        assert isinstance(output, np.ndarray), output
        assert output.tolist() == [[8.0, 8.0, 8.0]]
        assert server.wait_exit() == 0


def test_sixteen_streams_in_flight_at_sigterm_all_finish(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    import json

    root = Path(__file__).resolve().parents[2]
    with ServerProcess(
        "--model",
        f"tiny={root / 'examples/models/tiny-lm'}",
        "--drain-timeout-s",
        "120",
        env={"HF_HUB_OFFLINE": "1"},
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, timeout_s=120, what="ready")
        body = {
            "model": "tiny",
            "prompt": "The function returns",
            "max_tokens": 64,
            "stream": True,
            "ignore_eos": True,
            "temperature": 0.7,
            "stream_options": {"include_usage": True},
        }
        results: list[tuple[int, bool] | BaseException] = []
        first_token = threading.Barrier(17)

        def stream(seed: int) -> None:
            try:
                tokens, done, seen_first = 0, False, False
                with (
                    httpx.Client(base_url=server.url, timeout=120) as client,
                    client.stream("POST", "/v1/completions", json={**body, "seed": seed}) as r,
                ):
                    for line in r.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        if not seen_first:
                            seen_first = True
                            first_token.wait(timeout=60)
                        if line == "data: [DONE]":
                            done = True
                            continue
                        chunk = json.loads(line[6:])
                        if chunk.get("usage"):
                            tokens = chunk["usage"]["completion_tokens"]
                results.append((tokens, done))
            except BaseException as exc:
                results.append(exc)

        threads = [threading.Thread(target=stream, args=(i,), daemon=True) for i in range(16)]
        for thread in threads:
            thread.start()
        first_token.wait(timeout=60)  # every stream has started producing tokens
        server.send_signal(signal.SIGTERM)
        server.wait_log(lambda r: r.get("msg") == "SIGTERM: draining")
        with server.client() as client:
            refused = client.post("/v1/completions", json={"model": "tiny", "prompt": "x"})
        assert refused.status_code == 503
        assert refused.headers["connection"] == "close"
        for thread in threads:
            thread.join(timeout=120)
        assert results == [(64, True)] * 16
        assert server.wait_exit(timeout_s=60) == 0
