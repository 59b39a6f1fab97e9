"""Every OIP datatype, JSON and binary, REST and gRPC, through a real server running an
identity model written with the bring-your-own-code API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support.server import ServerProcess, wait_until

IDENTITY = """
from podserve.runtimes import ModelAPI


class Identity(ModelAPI):
    def predict(self, batch):
        return {name + "_out": array for name, array in batch.items()}
"""

SAMPLES = {
    "BOOL": np.array([[True, False, True]]),
    "UINT8": np.array([[0, 7, 255]], dtype=np.uint8),
    "UINT16": np.array([[0, 7, 65535]], dtype=np.uint16),
    "UINT32": np.array([[0, 7, 2**32 - 1]], dtype=np.uint32),
    "UINT64": np.array([[0, 7, 2**64 - 1]], dtype=np.uint64),
    "INT8": np.array([[-128, 0, 127]], dtype=np.int8),
    "INT16": np.array([[-32768, 0, 32767]], dtype=np.int16),
    "INT32": np.array([[-(2**31), 0, 2**31 - 1]], dtype=np.int32),
    "INT64": np.array([[-(2**63), 0, 2**63 - 1]], dtype=np.int64),
    "FP16": np.array([[-1.5, 0.0, 65504.0]], dtype=np.float16),
    "FP32": np.array([[-1.25, 0.1, 3.4e38]], dtype=np.float32),
    "FP64": np.array([[-1.25, 0.1, 1.7e308]], dtype=np.float64),
    "BYTES": np.array([[b"a", b"", "héllo".encode()]], dtype=object),
}


@pytest.fixture(scope="module")
def identity_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    directory: Path = tmp_path_factory.mktemp("identity")
    (directory / "identity.py").write_text(IDENTITY)
    (directory / "model.yaml").write_text(
        "runtime: custom\nmodel_class: 'identity:Identity'\nbatching: {enabled: false}\n"
    )
    with ServerProcess("--model", f"identity={directory}", grpc=True) as server:
        wait_until(lambda: server.get("/ready").status_code == 200, what="ready")
        yield server


@pytest.mark.parametrize("datatype", sorted(SAMPLES))
@pytest.mark.parametrize("binary", [False, True])
def test_rest_round_trip(identity_server: ServerProcess, datatype: str, binary: bool) -> None:
    sample = SAMPLES[datatype]
    client = httpclient.InferenceServerClient(f"127.0.0.1:{identity_server.http_port}")
    x = httpclient.InferInput("x", list(sample.shape), datatype)
    x.set_data_from_numpy(sample, binary_data=binary)
    result = client.infer(
        "identity", [x], outputs=[httpclient.InferRequestedOutput("x_out", binary_data=binary)]
    )
    got = result.as_numpy("x_out")
    if datatype == "BYTES":
        got = np.array(
            [[v.encode() if isinstance(v, str) else v for v in row] for row in got], dtype=object
        )
    assert got.dtype == sample.dtype
    np.testing.assert_array_equal(got, sample)
    client.close()


@pytest.mark.parametrize("datatype", sorted(SAMPLES))
def test_grpc_round_trip(identity_server: ServerProcess, datatype: str) -> None:
    sample = SAMPLES[datatype]
    client = grpcclient.InferenceServerClient(f"127.0.0.1:{identity_server.grpc_port}")
    x = grpcclient.InferInput("x", list(sample.shape), datatype)
    x.set_data_from_numpy(sample)
    got = client.infer("identity", [x]).as_numpy("x_out")
    assert got.dtype == sample.dtype
    np.testing.assert_array_equal(got, sample)
    client.close()
