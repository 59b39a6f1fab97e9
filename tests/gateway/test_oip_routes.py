"""OIP v2 through the gateway with Triton's own client, `tritonclient.http`, in front of a
real pod: the health probes and server metadata (no key, as Triton's), the versioned
model routes (key checked), and readiness that follows the pools."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

import podserve
from tests.gateway.conftest import Pods, base_config
from tests.gateway.support import GatewayProcess, create_key
from tests.support.ports import free_port
from tests.support.server import wait_until

FEATURES = np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32)


@pytest.fixture(scope="module")
def gateway(pods: Pods, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("gw-oip")
    with GatewayProcess(base_config(pods), workdir, env={"HOSTED_API_KEY": "sk-x"}) as process:
        yield process


@pytest.fixture(scope="module")
def auth(gateway: GatewayProcess) -> dict[str, str]:
    return {"authorization": f"Bearer {create_key(gateway.config_path)}"}


def _client(gateway: GatewayProcess) -> triton.InferenceServerClient:
    return triton.InferenceServerClient(url=gateway.url.removeprefix("http://"))


def _infer(
    client: triton.InferenceServerClient, auth: dict[str, str], version: str = ""
) -> np.ndarray:
    features = triton.InferInput("features", list(FEATURES.shape), "FP32")
    features.set_data_from_numpy(FEATURES)  # the binary tensor extension, by default
    # a copy: tritonclient adds the binary header's length to the dict it is given
    result = client.infer("iris", [features], model_version=version, headers=dict(auth))
    name = result.get_response()["outputs"][0]["name"]
    output: np.ndarray = result.as_numpy(name)
    return output


def test_health_and_server_metadata_answer_tritonclient_without_a_key(
    gateway: GatewayProcess,
) -> None:
    client = _client(gateway)
    try:
        assert client.is_server_live()
        # ready once the scraper has seen the pod ready
        wait_until(client.is_server_ready, timeout_s=30, what="gateway OIP-ready")
        metadata = client.get_server_metadata()
    finally:
        client.close()
    assert metadata["name"] == "podserve-gateway"
    assert metadata["version"] == podserve.__version__
    assert "binary_tensor_data" in metadata["extensions"]
    with httpx.Client(base_url=gateway.url) as http:
        for path in ("/v2", "/v2/health/live", "/v2/health/ready"):
            reply = http.get(path)
            assert reply.status_code == 200, (path, reply.text)
            assert "x-podserve-gateway-overhead-ms" in reply.headers


def test_versioned_model_routes_are_proxied_like_the_unversioned(
    gateway: GatewayProcess, auth: dict[str, str]
) -> None:
    client = _client(gateway)
    try:
        versioned = client.get_model_metadata("iris", "1", headers=auth)
        plain = client.get_model_metadata("iris", headers=auth)
        assert client.is_model_ready("iris", "1", headers=auth)
        assert np.array_equal(_infer(client, auth, "1"), _infer(client, auth))
        # the key is checked on the versioned routes too
        with pytest.raises(InferenceServerException) as refused:
            client.get_model_metadata("iris", "1")
    finally:
        client.close()
    assert versioned["name"] == plain["name"] == "iris"
    assert versioned["inputs"] == plain["inputs"]
    assert refused.value.status() == "401"
    with httpx.Client(base_url=gateway.url, headers=auth) as http:
        reply = http.get("/v2/models/iris/versions/1/ready")
    assert reply.status_code == 200
    assert reply.headers["x-podserve-gateway-upstream"] == "chat"


def test_ready_says_no_while_no_pool_pod_is(pods: Pods, tmp_path: Path) -> None:
    """OIP goes to pools only: with the pool down the gateway is live, not OIP-ready (the
    fallback serves the /v1 routes, not OIP); its own /ready, the replica's Kubernetes
    readiness, stays 200."""
    dead = f"http://127.0.0.1:{free_port()}"
    config = base_config(
        pods, pools=[{"name": "chat", "models": ["tiny-lm", "iris"], "endpoints": [dead]}]
    )
    with GatewayProcess(config, tmp_path, env={"HOSTED_API_KEY": "sk-x"}) as gateway:
        client = _client(gateway)
        try:
            live, ready = client.is_server_live(), client.is_server_ready()
        finally:
            client.close()
        with httpx.Client(base_url=gateway.url) as http:
            oip_ready, own_ready = http.get("/v2/health/ready"), http.get("/ready")
    assert (live, ready) == (True, False)
    assert oip_ready.status_code == 503, oip_ready.text
    assert oip_ready.headers["retry-after"] == "1"
    assert own_ready.status_code == 200


def test_refusals_on_oip_routes_are_oip_shaped_for_tritonclient(
    gateway: GatewayProcess, auth: dict[str, str]
) -> None:
    # tritonclient reads `error` as a string: given OpenAI's object it raised TypeError
    # (str + dict) while building its own exception, and the reason was lost.
    client = _client(gateway)
    try:
        features = triton.InferInput("features", list(FEATURES.shape), "FP32")
        features.set_data_from_numpy(FEATURES)
        with pytest.raises(InferenceServerException) as no_key:
            client.infer("iris", [features], headers={"authorization": "Bearer psk-wrong"})
        assert "key" in str(no_key.value)
        with pytest.raises(InferenceServerException) as unknown:
            client.infer("no-such-model", [features], headers=dict(auth))
        assert "no-such-model" in str(unknown.value)
        with pytest.raises(InferenceServerException) as metadata:
            client.get_model_metadata("no-such-model", headers=dict(auth))
        assert "no-such-model" in str(metadata.value)
    finally:
        client.close()
    reply = httpx.post(f"{gateway.url}/v2/models/iris/infer", content=b"{}")
    assert reply.status_code == 401
    assert isinstance(reply.json()["error"], str)
    stray = httpx.get(f"{gateway.url}/v2/nowhere")
    assert stray.status_code == 404
    assert isinstance(stray.json()["error"], str)
