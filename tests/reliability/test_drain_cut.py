"""A drain that times out (issue 15 item 3), on a real `podserve serve` process: the
documented exit code (1), each cut REST request a JSON 503 with Retry-After, each cut
gRPC call (unary and streaming, through grpcio and tritonclient) UNAVAILABLE with the
drain named and a retry-after, one log line per cut request, and no SIGABRT,
plain-text 500 or traceback."""

from __future__ import annotations

import queue
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
from tritonclient.utils import InferenceServerException

from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc._generated import inference_pb2_grpc as pb_grpc
from tests.support.server import ServerProcess, infer_body, wait_until, write_model

pytestmark = pytest.mark.slow


def _post(server: ServerProcess, values: list[float], sink: list[httpx.Response]) -> None:
    with server.client(timeout_s=60) as client:
        sink.append(client.post("/v2/models/slow/infer", json=infer_body(values)))


def _grpc(port: int, sink: list[grpc.RpcError | pb.ModelInferResponse]) -> None:
    request = pb.ModelInferRequest(model_name="slow")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 3])
    request.raw_input_contents.append(np.ones(3, dtype="<f4").tobytes())
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            sink.append(
                pb_grpc.GRPCInferenceServiceStub(channel).ModelInfer(
                    request, timeout=60, metadata=(("x-request-id", "unary-1"),)
                )
            )
        except grpc.RpcError as error:
            sink.append(error)


def _features() -> list[triton_grpc.InferInput]:
    features = triton_grpc.InferInput("x", [1, 3], "FP32")
    features.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
    return [features]


def _write_slow(root: Path) -> None:
    """A model whose calls take 120 s, unbatched, three at once: every request stays in
    flight until the drain cuts it."""
    write_model(
        root,
        "slow",
        parameters={"delay_s": 120},
        batching={"enabled": False},
        limits={"max_batch_time_s": 600},
        instance_count=3,
        warmup=False,
    )


@dataclass
class _InFlight:
    """REST requests, one unary gRPC call (grpcio) and one ModelStreamInfer stream
    (tritonclient) to the slow model, each on its own client, and what they got."""

    server: ServerProcess
    rest: list[httpx.Response] = field(default_factory=list)
    rpcs: list[grpc.RpcError | pb.ModelInferResponse] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)
    answers: queue.Queue[object] = field(default_factory=queue.Queue)

    def start(self, *rest_values: list[float]) -> None:
        port = self.server.grpc_port
        assert port is not None
        self.threads = [
            *(
                threading.Thread(target=_post, args=(self.server, values, self.rest))
                for values in rest_values
            ),
            threading.Thread(target=_grpc, args=(port, self.rpcs)),
        ]
        for thread in self.threads:
            thread.start()
        self._streamer = triton_grpc.InferenceServerClient(f"127.0.0.1:{port}")
        self._streamer.start_stream(
            callback=lambda result, error: self.answers.put(error or result)
        )
        self._streamer.async_stream_infer("slow", _features(), request_id="stream-1")

    def finish(self) -> tuple[int, object]:
        """The server's exit code and the stream's last answer, once every client ended."""
        code = self.server.wait_exit(timeout_s=30)
        for thread in self.threads:
            thread.join(timeout=30)
        stream_error = self.answers.get(timeout=30)
        self._streamer.stop_stream()
        self._streamer.close()
        self.server.stop()
        return code, stream_error


def test_drain_timeout_answers_each_cut_request_and_exits_1(tmp_path: Path) -> None:
    _write_slow(tmp_path)
    args = ("--model-repository", str(tmp_path), "--drain-timeout-s", "0.5")
    with ServerProcess(*args, grpc=True) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        clients = _InFlight(server)
        clients.start([1, 2, 3], [4, 5, 6])
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 4,
            what="four in flight",
        )
        server.send_signal(signal.SIGTERM)
        code, stream_error = clients.finish()
    rest, rpcs = clients.rest, clients.rpcs

    assert code == 1  # the documented exit code of a drain that cut requests, not -6/134
    assert len(rest) == 2
    for response in rest:
        assert response.status_code == 503
        assert response.headers["content-type"] == "application/json"
        assert "drain_timeout_s expired" in response.json()["error"]
        assert response.headers["retry-after"]
        assert response.headers["connection"] == "close"
    # gRPC: UNAVAILABLE (retryable by clients and proxies), not CANCELLED
    assert len(rpcs) == 1
    (rpc,) = rpcs
    assert isinstance(rpc, grpc.RpcError)
    assert rpc.code() == grpc.StatusCode.UNAVAILABLE
    assert "drain_timeout_s expired" in rpc.details()
    trailers = dict(rpc.trailing_metadata())
    assert int(trailers["retry-after"]) >= 1
    assert trailers["x-request-id"] == "unary-1"
    assert isinstance(stream_error, InferenceServerException)
    assert stream_error.status() == "StatusCode.UNAVAILABLE"
    assert "drain_timeout_s expired" in stream_error.message()

    lines = [r for r in server.logs if r.get("msg") == "request cut at drain timeout"]
    assert sorted(line["path"] for line in lines) == [
        "/inference.GRPCInferenceService/ModelInfer",
        "/inference.GRPCInferenceService/ModelStreamInfer",
        "/v2/models/slow/infer",
        "/v2/models/slow/infer",
    ]
    assert {line["model"] for line in lines} == {"slow"}
    (unary_line,) = [line for line in lines if line["path"].endswith("/ModelInfer")]
    assert unary_line["request_id"] == "unary-1"
    text = "".join(server.raw_lines)
    assert "Traceback" not in text
    assert "Exception in ASGI application" not in text


def test_sigterm_while_a_model_loads_exits_without_waiting_for_the_load(tmp_path: Path) -> None:
    """Nothing is in flight, so the drain completes at once; the process must not then
    wait for the loader thread (asyncio.run's executor join did: the whole load)."""
    write_model(tmp_path, "big", parameters={"load_delay_s": 600}, warmup=False)
    with ServerProcess("--model-repository", str(tmp_path), grpc=True) as server:
        wait_until(lambda: server.get("/startup").json()["loading"] == ["big"], what="loading")
        server.send_signal(signal.SIGTERM)
        code = server.wait_exit(timeout_s=60)  # the load would take 600 s
        server.stop()
    assert code == 0
    messages = [r.get("msg") for r in server.logs]
    assert "drain complete; exiting" in messages
    assert "Traceback" not in "".join(server.raw_lines)


def test_sigterm_with_bodies_still_arriving_exits_without_a_traceback_each(
    tmp_path: Path,
) -> None:
    """Requests still sending their bodies were admitted nothing: uvicorn's shutdown
    cancels them, and each used to log "Exception in ASGI application" with a
    CancelledError traceback (200 slow clients, 200 tracebacks)."""
    import socket

    write_model(tmp_path, "fast")
    with ServerProcess("--model-repository", str(tmp_path)) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        port = int(server.url.rsplit(":", 1)[1])
        head = (
            b"POST /v2/models/fast/infer HTTP/1.1\r\nhost: pod\r\n"
            b"content-type: application/json\r\ncontent-length: 1000\r\n\r\n{"
        )
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(5)]
        try:
            for sock in slow:
                sock.sendall(head)  # the rest of the body never comes
            # A round trip after them: the loop has read their heads by its answer (it
            # reads every ready socket in a turn), so their requests await their bodies.
            assert server.get("/healthz").status_code == 200
            server.send_signal(signal.SIGTERM)
            code = server.wait_exit(timeout_s=60)
        finally:
            for sock in slow:
                sock.close()
        server.stop()
    assert code == 0
    text = "".join(server.raw_lines)
    assert "Exception in ASGI application" not in text
    assert "CancelledError" not in text


def test_a_second_sigterm_exits_at_once_and_grpc_calls_end_unavailable(tmp_path: Path) -> None:
    """No drain timeout this time: the second signal stops the server, whose stop ends
    the gRPC calls (UNAVAILABLE, gRPC's own "Cancelling all calls"); only the REST
    request is answered by podserve, and the process exits 1 without a traceback."""
    _write_slow(tmp_path)
    args = ("--model-repository", str(tmp_path), "--drain-timeout-s", "300")
    with ServerProcess(*args, grpc=True) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        clients = _InFlight(server)
        clients.start([1, 2, 3])
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 3,
            what="three in flight",
        )
        server.send_signal(signal.SIGTERM)
        server.wait_log(lambda r: r.get("msg") == "SIGTERM: draining")
        server.send_signal(signal.SIGTERM)
        code, stream_error = clients.finish()
    rest, rpcs = clients.rest, clients.rpcs

    assert code == 1
    assert [response.status_code for response in rest] == [503]
    (rpc,) = rpcs
    assert isinstance(rpc, grpc.RpcError)
    assert rpc.code() == grpc.StatusCode.UNAVAILABLE
    assert isinstance(stream_error, InferenceServerException)
    assert stream_error.status() == "StatusCode.UNAVAILABLE"
    lines = [r for r in server.logs if r.get("msg") == "request cut at drain timeout"]
    assert [line["path"] for line in lines] == ["/v2/models/slow/infer"]
    assert "Traceback" not in "".join(server.raw_lines)


def test_open_streams_end_after_their_last_answer_when_the_drain_completes(
    tmp_path: Path,
) -> None:
    """A clean drain with two ModelStreamInfer streams open: one idle (its request was
    answered before SIGTERM), one whose request is still running. The running one is
    answered (the drain waits for it), then both streams end UNAVAILABLE "draining";
    nothing is cut, no cut line is logged, the exit is 0, and the idle stream does not
    hold the gRPC server's stop for its grace (it used to end only when the grace ran
    out, "Cancelling all calls")."""
    write_model(tmp_path, "fast", warmup=False)
    write_model(
        tmp_path, "slow", parameters={"delay_s": 1.0}, batching={"enabled": False}, warmup=False
    )
    with ServerProcess("--model-repository", str(tmp_path), grpc=True) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        assert server.grpc_port is not None
        url = f"127.0.0.1:{server.grpc_port}"
        idle, running = (triton_grpc.InferenceServerClient(url) for _ in range(2))
        idle_answers: queue.Queue[tuple[object, object]] = queue.Queue()
        running_answers: queue.Queue[tuple[object, object]] = queue.Queue()
        idle.start_stream(callback=lambda result, error: idle_answers.put((result, error)))
        running.start_stream(callback=lambda result, error: running_answers.put((result, error)))
        idle.async_stream_infer("fast", _features(), request_id="idle-1")
        assert idle_answers.get(timeout=30)[1] is None
        running.async_stream_infer("slow", _features(), request_id="running-1")
        wait_until(
            lambda: server.metric("podserve_inflight_requests", {"model": "slow"}) == 1,
            what="one in flight",
        )
        server.send_signal(signal.SIGTERM)
        code = server.wait_exit(timeout_s=30)
        idle_end = idle_answers.get(timeout=30)
        running_first = running_answers.get(timeout=30)
        running_end = running_answers.get(timeout=30)
        for client in (idle, running):
            client.stop_stream()
            client.close()
        server.stop()

    assert code == 0
    result, error = running_first
    assert error is None  # the request in flight was answered
    assert isinstance(result, triton_grpc.InferResult)
    assert result.get_response().id == "running-1"
    for result, error in (idle_end, running_end):
        assert result is None
        assert isinstance(error, InferenceServerException)
        assert error.status() == "StatusCode.UNAVAILABLE"
        assert "draining" in error.message()
    messages = [r.get("msg") for r in server.logs]
    assert "drain complete; exiting" in messages
    assert "request cut at drain timeout" not in messages
    assert "Traceback" not in "".join(server.raw_lines)
