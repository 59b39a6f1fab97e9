"""Payload logging: sampling, redaction, a bounded buffer that drops instead of blocking,
file rotation, CloudEvents over HTTP, and a slow or dead sink never delaying inference."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from podserve.core.tensors import Datatype, InferRequest, InferResponse, Tensor
from podserve.obs.payload_sinks import HttpCloudEventsSink, JsonlFileSink
from podserve.obs.payloads import PayloadLogger
from podserve.obs.redaction import REDACTED
from tests.support.server import ServerProcess, infer_body, wait_until, write_model


class ListSink:
    def __init__(self, gate: threading.Event | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        self.gate = gate
        self.entered = threading.Event()

    def write(self, events: Sequence[dict[str, Any]]) -> None:
        self.entered.set()
        if self.gate is not None:
            self.gate.wait()
        self.events.extend(events)

    def close(self) -> None:
        pass


def _pair(value: float) -> tuple[InferRequest, InferResponse]:
    x = Tensor("x", Datatype.FP32, np.full((1, 2), value, dtype=np.float32))
    secret = Tensor("ssn", Datatype.BYTES, np.array([b"123-45-6789"], dtype=object))
    request = InferRequest("m", (x, secret), parameters={"api_key": "k", "timeout": 1})
    response = InferResponse("m", (Tensor("y", Datatype.FP32, x.data * 2),), model_version="1")
    return request, response


def test_records_become_redacted_cloudevents() -> None:
    sink = ListSink()
    counts: dict[str, int] = {}
    logger = PayloadLogger(
        sinks=[sink],
        sample_rate=1.0,
        redact=frozenset({"ssn", "api_key"}),
        count=lambda result, n: counts.__setitem__(result, counts.get(result, 0) + n),
    )
    logger.offer(*_pair(1.5), request_id="r1", endpoint="v2")
    logger.close()
    (event,) = sink.events
    assert event["specversion"] == "1.0"
    assert event["type"] == "dev.podserve.inference"
    assert event["source"] == "podserve/m"
    assert event["subject"] == "r1"
    data = event["data"]
    assert data["inputs"][0] == {
        "name": "x",
        "datatype": "FP32",
        "shape": [1, 2],
        "data": [1.5, 1.5],
    }
    assert data["inputs"][1]["data"] == REDACTED
    assert data["parameters"] == {"api_key": REDACTED, "timeout": 1}
    assert data["outputs"][0]["data"] == [3.0, 3.0]
    assert counts == {"written": 1}


def test_sampling_rate_zero_logs_nothing() -> None:
    sink = ListSink()
    logger = PayloadLogger(sinks=[sink], sample_rate=0.0)
    for i in range(100):
        logger.offer(*_pair(i), request_id=str(i), endpoint="v2")
    logger.close()
    assert sink.events == []


def test_full_buffer_drops_and_counts_instead_of_blocking() -> None:
    gate = threading.Event()
    sink = ListSink(gate)
    counts: dict[str, int] = {}
    logger = PayloadLogger(
        sinks=[sink],
        sample_rate=1.0,
        buffer_records=5,
        batch_records=1,
        count=lambda result, n: counts.__setitem__(result, counts.get(result, 0) + n),
    )
    logger.offer(*_pair(0), request_id="0", endpoint="v2")
    assert sink.entered.wait(10)  # the writer now holds record 0, blocked in the sink
    for i in range(1, 21):  # would hang here if offer waited for the sink
        logger.offer(*_pair(i), request_id=str(i), endpoint="v2")
    assert counts["dropped"] == 15  # 5 buffered, 15 dropped
    gate.set()
    logger.close()
    assert [e["subject"] for e in sink.events] == [str(i) for i in range(6)]
    assert counts["written"] == 6


def test_jsonl_file_rotates_by_size(tmp_path: Path) -> None:
    path = tmp_path / "payloads.jsonl"
    sink = JsonlFileSink(path, max_bytes=1024, backups=2)
    for i in range(40):
        sink.write([{"i": i, "pad": "x" * 100}])
    sink.close()
    assert path.exists()
    assert (tmp_path / "payloads.jsonl.1").exists()
    assert (tmp_path / "payloads.jsonl.2").exists()
    assert not (tmp_path / "payloads.jsonl.3").exists()
    lines = [
        json.loads(line)
        for p in (path, tmp_path / "payloads.jsonl.1")
        for line in p.read_text().splitlines()
    ]
    assert lines[-1]["i"] <= 39


class _Receiver(http.server.BaseHTTPRequestHandler):
    bodies: list[tuple[str, bytes]] = []
    gate: threading.Event = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        type(self).gate.wait(30)
        type(self).bodies.append((self.headers["content-type"], body))
        self.send_response(202)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, type[_Receiver]]]:
    # a subclass per test, so class-level state is not shared between tests
    handler = cast(
        type[_Receiver],
        type("Receiver", (_Receiver,), {"bodies": [], "gate": threading.Event()}),
    )
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/events", handler
    handler.gate.set()
    httpd.shutdown()
    httpd.server_close()


def test_http_sink_posts_batched_cloudevents(receiver: tuple[str, type[_Receiver]]) -> None:
    url, handler = receiver
    handler.gate.set()
    HttpCloudEventsSink(url).write([{"id": "1"}, {"id": "2"}])
    ((content_type, body),) = handler.bodies
    assert content_type == "application/cloudevents-batch+json"
    assert json.loads(body) == [{"id": "1"}, {"id": "2"}]


def test_slow_or_dead_sink_never_delays_or_fails_inference(
    tmp_path: Path, receiver: tuple[str, type[_Receiver]]
) -> None:
    url, handler = receiver  # the receiver holds every POST until the gate opens
    write_model(tmp_path, "m")
    with ServerProcess(
        "--model-repository",
        str(tmp_path),
        "--payload-log-url",
        url,
        "--payload-log-sample-rate",
        "1",
        "--payload-log-buffer-records",
        "4",
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        with server.client(timeout_s=10) as client:
            for i in range(30):  # the sink is stuck the whole time
                response = client.post("/v2/models/m/infer", json=infer_body([i, i, i]))
                assert response.status_code == 200
        assert server.metric("podserve_payload_records_total", {"result": "dropped"}) >= 20
        handler.gate.set()
        wait_until(
            lambda: server.metric("podserve_payload_records_total", {"result": "written"}) >= 1,
            what="records written once the sink recovers",
        )
    dead = "http://127.0.0.1:9/nothing-listens-here"
    with ServerProcess(
        "--model-repository",
        str(tmp_path),
        "--payload-log-url",
        dead,
        "--payload-log-sample-rate",
        "1",
    ) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        with server.client() as client:
            for i in range(10):
                assert (
                    client.post("/v2/models/m/infer", json=infer_body([i, i, i])).status_code == 200
                )
        wait_until(
            lambda: server.metric("podserve_payload_records_total", {"result": "sink_error"}) >= 1,
            what="sink errors counted",
        )
