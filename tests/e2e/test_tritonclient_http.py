"""OIP v2 REST conformance, proved with Triton's own HTTP client against the real server."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support.server import ServerProcess


@pytest.fixture
def client(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(f"127.0.0.1:{server.http_port}")


def test_health_and_metadata(client: httpclient.InferenceServerClient) -> None:
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("iris")
    metadata = client.get_server_metadata()
    assert metadata["name"] == "podserve"
    assert {"binary_tensor_data", "model_repository"} <= set(metadata["extensions"])
    model = client.get_model_metadata("iris")
    assert model["inputs"] == [{"name": "features", "datatype": "FP32", "shape": [-1, 4]}]
    assert model["outputs"] == [{"name": "label", "datatype": "INT64", "shape": [-1]}]
    # The ONNX runtime derives metadata from the graph when model.yaml declares none.
    mlp = client.get_model_metadata("mlp")
    assert mlp["inputs"][0]["shape"] == [-1, 64]


@pytest.mark.parametrize("binary", [False, True])
def test_iris_predicts_the_known_classes(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    rows = np.array(
        [[5.1, 3.5, 1.4, 0.2], [6.7, 3.0, 5.2, 2.3], [5.9, 3.0, 4.2, 1.5]], dtype=np.float32
    )
    features = httpclient.InferInput("features", list(rows.shape), "FP32")
    features.set_data_from_numpy(rows, binary_data=binary)
    output = httpclient.InferRequestedOutput("label", binary_data=binary)
    result = client.infer("iris", [features], outputs=[output], request_id="r-1")
    assert result.as_numpy("label").tolist() == [0, 2, 1]
    assert result.get_response()["id"] == "r-1"


@pytest.mark.parametrize("binary", [False, True])
def test_bytes_in_and_out_through_custom_code(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    texts = np.array(
        [b"what a wonderful, delightful film", b"terrible, boring and awful"], dtype=object
    )
    text = httpclient.InferInput("text", [2], "BYTES")
    text.set_data_from_numpy(texts, binary_data=binary)
    result = client.infer(
        "sentiment",
        [text],
        outputs=[
            httpclient.InferRequestedOutput(n, binary_data=binary) for n in ("label", "score")
        ],
    )
    # tritonclient gives JSON BYTES back as str and binary BYTES as bytes.
    labels = [v.decode() if isinstance(v, bytes) else v for v in result.as_numpy("label")]
    assert labels == ["positive", "negative"]
    scores = result.as_numpy("score")
    assert scores.dtype == np.float32
    assert scores[0] > 0.5 > scores[1]


@pytest.mark.parametrize("binary", [False, True])
def test_fp16_round_trip_through_the_fake_model(
    client: httpclient.InferenceServerClient, binary: bool
) -> None:
    # echo declares FP32; FP16 input must be refused naming the datatype.
    x = httpclient.InferInput("x", [1, 3], "FP16")
    x.set_data_from_numpy(np.ones((1, 3), dtype=np.float16), binary_data=binary)
    with pytest.raises(InferenceServerException, match="datatype FP16, expected FP32"):
        client.infer("echo", [x])
    y = httpclient.InferInput("x", [2, 3], "FP32")
    y.set_data_from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3), binary_data=binary)
    result = client.infer(
        "echo", [y], outputs=[httpclient.InferRequestedOutput("y", binary_data=binary)]
    )
    np.testing.assert_array_equal(
        result.as_numpy("y"), np.arange(6, dtype=np.float32).reshape(2, 3) * 2
    )


def test_errors_surface_with_our_message(client: httpclient.InferenceServerClient) -> None:
    x = httpclient.InferInput("x", [1, 3], "FP32")
    x.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
        client.infer("nope", [x])
    with pytest.raises(InferenceServerException, match="missing input 'features'"):
        client.infer("iris", [x])
    bad = httpclient.InferInput("x", [1, 3], "FP32")
    bad.set_data_from_numpy(np.full((1, 3), 666, dtype=np.float32))
    with pytest.raises(InferenceServerException, match="refuses the value 666"):
        client.infer("echo", [bad])


def test_repository_index_load_and_unload(client: httpclient.InferenceServerClient) -> None:
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert index["iris"]["state"] == "READY"
    assert index["lazy"]["state"] == "UNAVAILABLE"
    assert not client.is_model_ready("lazy")
    client.load_model("lazy")
    assert client.is_model_ready("lazy")
    x = httpclient.InferInput("x", [1, 3], "FP32")
    x.set_data_from_numpy(np.ones((1, 3), dtype=np.float32))
    assert client.infer("lazy", [x]).as_numpy("y").tolist() == [[2.0, 2.0, 2.0]]
    client.unload_model("lazy")
    assert not client.is_model_ready("lazy")
    # unloaded on purpose: a 404 that says so, not a retryable 503 (issue 15 item 4)
    with pytest.raises(InferenceServerException, match="unloaded through the repository API"):
        client.infer("lazy", [x])
    with pytest.raises(InferenceServerException, match="unknown model"):
        client.load_model("nope")


def test_triton_model_config_describes_the_model(
    client: httpclient.InferenceServerClient,
) -> None:
    config = client.get_model_config("iris")
    assert config["name"] == "iris"
    assert config["backend"] == "sklearn"
    assert config["max_batch_size"] == 64
    # dims leave out the batch dimension when the model batches, as in Triton
    assert config["input"] == [
        {"name": "features", "data_type": "TYPE_FP32", "dims": [4], "format": "FORMAT_NONE"}
    ]
    assert config["output"] == [
        {"name": "label", "data_type": "TYPE_INT64", "dims": [1], "reshape": {"shape": []}}
    ]
    assert config["dynamic_batching"]["max_queue_delay_microseconds"] == 0
    assert config["instance_group"][0]["count"] == 1
    assert config["parameters"]["method"] == {"string_value": "predict"}
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
        client.get_model_config("nope")


def test_triton_statistics_count_what_the_model_computed(
    client: httpclient.InferenceServerClient,
) -> None:
    def stats() -> dict[str, Any]:
        (only,) = client.get_inference_statistics("echo")["model_stats"]
        return dict(only)

    before = stats()
    x = httpclient.InferInput("x", [2, 3], "FP32")
    x.set_data_from_numpy(np.ones((2, 3), dtype=np.float32))
    for _ in range(3):
        client.infer("echo", [x])
    bad = httpclient.InferInput("x", [1, 3], "FP32")
    bad.set_data_from_numpy(np.full((1, 3), 666, dtype=np.float32))  # the model refuses it
    with pytest.raises(InferenceServerException):
        client.infer("echo", [bad])
    after = stats()
    grew = {
        key: after["inference_stats"][key]["count"] - before["inference_stats"][key]["count"]
        for key in ("success", "fail", "queue", "compute_infer")
    }
    assert grew == {"success": 3, "fail": 1, "queue": 4, "compute_infer": 3}
    # successes only, as in Triton: rows, and model calls (one per request here)
    assert after["inference_count"] - before["inference_count"] == 6
    assert after["execution_count"] - before["execution_count"] == 3
    assert after["last_inference"] > 0
    assert after["inference_stats"]["success"]["ns"] > before["inference_stats"]["success"]["ns"]
    for phase in ("compute_input", "compute_infer", "compute_output"):  # timed apart
        assert after["inference_stats"][phase]["ns"] > before["inference_stats"][phase]["ns"]
    sizes = {b["batch_size"]: b["compute_infer"]["count"] for b in after["batch_stats"]}
    assert sizes[2] >= 3
    everything = client.get_inference_statistics()["model_stats"]
    assert {"iris", "echo"} <= {s["name"] for s in everything}
    assert "lazy" not in {s["name"] for s in everything}  # not loaded
    with pytest.raises(InferenceServerException, match="unknown model: 'nope'"):
        client.get_inference_statistics("nope")
