"""Per-model readiness for an unknown model, as Triton answers it: over gRPC,
`ModelReady` is OK with ready=false (Triton core src/server.cc `ModelIsReady` leaves
`*ready = false` and returns success when the model is not found); over REST,
`/v2/models/{m}/ready` stays a 404 naming the model (DESIGN.md §2)."""

from __future__ import annotations

import httpx
import tritonclient.grpc.aio as triton_aio


async def test_grpc_model_ready_is_false_for_an_unknown_model(
    grpc_client: triton_aio.InferenceServerClient,
) -> None:
    assert await grpc_client.is_model_ready("double")
    assert not await grpc_client.is_model_ready("nope")
    assert not await grpc_client.is_model_ready("double", "7")  # unknown version


async def test_rest_model_ready_is_a_404_for_an_unknown_model(rest: httpx.AsyncClient) -> None:
    assert (await rest.get("/v2/models/double/ready")).status_code == 200
    response = await rest.get("/v2/models/nope/ready")
    assert response.status_code == 404
    assert "nope" in response.json()["error"]
