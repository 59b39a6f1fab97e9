"""OIP v2 gRPC against the real server, over the same data plane as REST."""

from __future__ import annotations

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
