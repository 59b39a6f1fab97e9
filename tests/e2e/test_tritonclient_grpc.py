"""OIP v2 gRPC against the real server, over the same data plane as REST."""

from __future__ import annotations

import queue
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")


def test_health_metadata_and_infer(client: grpcclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("iris")
    assert client.get_model_metadata("iris").inputs[0].name == "features"
    rows = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]], dtype=np.float32)
    features = grpcclient.InferInput("features", list(rows.shape), "FP32")
    features.set_data_from_numpy(rows)
    assert client.infer("iris", [features]).as_numpy("label").tolist() == [0, 2]
    text = grpcclient.InferInput("text", [1], "BYTES")
    text.set_data_from_numpy(np.array([b"a delightful, wonderful story"], dtype=object))
    assert client.infer("sentiment", [text]).as_numpy("label").tolist() == [b"positive"]


def test_errors_and_repository(client: grpcclient.InferenceServerClient) -> None:
    x = grpcclient.InferInput("x", [1, 3], "FP32")
    x.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="unknown model") as info:
        client.infer("nope", [x])
    assert info.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException, match="missing input 'features'") as bad:
        client.infer("iris", [x])
    assert bad.value.status() == "StatusCode.INVALID_ARGUMENT"
    names = {m.name for m in client.get_model_repository_index().models}
    assert {"iris", "mlp", "sentiment", "echo"} <= names


def test_rest_and_grpc_share_one_data_plane(
    server: ServerProcess, client: grpcclient.InferenceServerClient
) -> None:
    before = server.metric("podserve_batch_size_count", {"model": "echo"})
    x = grpcclient.InferInput("x", [1, 3], "FP32")
    x.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
    client.infer("echo", [x])
    assert server.metric("podserve_batch_size_count", {"model": "echo"}) == before + 1


def test_stream_infer_answers_every_request_and_reports_errors_in_band(
    client: grpcclient.InferenceServerClient,
) -> None:
    answers: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    rows = np.array([[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3]], dtype=np.float32)
    for i in range(6):
        features = grpcclient.InferInput("features", [1, 4], "FP32")
        features.set_data_from_numpy(rows[i % 2 : i % 2 + 1])
        client.async_stream_infer("iris", [features], request_id=f"r{i}")
    wrong = grpcclient.InferInput("x", [1, 3], "FP32")
    wrong.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
    client.async_stream_infer("iris", [wrong], request_id="bad-input")
    client.async_stream_infer("nope", [wrong], request_id="no-model")
    client.stop_stream()  # closes our side; returns once the server has answered all
    got = [answers.get(timeout=10) for _ in range(8)]
    labels = {
        result.get_response().id: result.as_numpy("label").tolist()
        for result, error in got
        if error is None
    }
    assert labels == {f"r{i}": [0] if i % 2 == 0 else [2] for i in range(6)}
    errors = [str(error) for _, error in got if error is not None]
    assert len(errors) == 2
    assert any("missing input 'features'" in e for e in errors), errors
    assert any("unknown model: 'nope'" in e for e in errors), errors
    assert answers.empty()
    # the stream was closed cleanly: the client can open another one
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    features = grpcclient.InferInput("features", [1, 4], "FP32")
    features.set_data_from_numpy(rows[:1])
    client.async_stream_infer("iris", [features], request_id="again")
    client.stop_stream()
    result, error = answers.get(timeout=10)
    assert error is None
    assert result.get_response().id == "again"


def test_model_config_and_statistics_over_grpc(client: grpcclient.InferenceServerClient) -> None:
    config = client.get_model_config("iris").config
    assert (config.name, config.backend, config.max_batch_size) == ("iris", "sklearn", 64)
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("features", 11, [4])  # TYPE_FP32, without the batch dimension
    ]
    before = client.get_inference_statistics("iris").model_stats[0]
    features = grpcclient.InferInput("features", [3, 4], "FP32")
    features.set_data_from_numpy(np.ones((3, 4), dtype=np.float32))
    client.infer("iris", [features])
    after = client.get_inference_statistics("iris").model_stats[0]
    assert after.inference_count - before.inference_count == 3
    assert after.inference_stats.success.count - before.inference_stats.success.count == 1
    assert after.execution_count - before.execution_count == 1
    names = {s.name for s in client.get_inference_statistics().model_stats}
    assert {"iris", "echo"} <= names
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
        client.get_inference_statistics("nope")
