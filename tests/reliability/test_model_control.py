"""Triton's model-control mode and the admin token (issue 15 item 4), through both edges:
`none` (the default) refuses the repository API's load and unload; `explicit` allows
them, with the admin token when one is set; a model unloaded on purpose answers a
non-retryable 404 / NOT_FOUND while the server stays ready."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import pytest_asyncio

from podserve.dataplane.model_control import NOT_ALLOWED
from podserve.server.grpc._generated import inference_pb2 as pb
from tests.support.planes import Edges, edges

TOKEN = "s3cret-admin-token"
BODY = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 3], "data": [1, 2, 3]}]}


@pytest_asyncio.fixture
async def default(tmp_path: Path) -> AsyncIterator[Edges]:
    async with edges(tmp_path, examples=()) as pair:
        yield pair


@pytest_asyncio.fixture
async def explicit(tmp_path: Path) -> AsyncIterator[Edges]:
    async with edges(
        tmp_path, examples=(), model_control_mode="explicit", admin_token=TOKEN
    ) as pair:
        yield pair


async def grpc_code(call: object) -> grpc.StatusCode:
    try:
        await call  # type: ignore[misc]  # a grpc.aio unary call
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def auth(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_mode_none_refuses_load_and_unload_on_both_edges(default: Edges) -> None:
    for action in ("load", "unload"):
        response = await default.rest.post(f"/v2/repository/models/double/{action}")
        assert response.status_code == 400
        assert NOT_ALLOWED in response.json()["error"]
    unload = default.grpc.RepositoryModelUnload(
        pb.RepositoryModelUnloadRequest(model_name="double")
    )
    assert await grpc_code(unload) is grpc.StatusCode.INVALID_ARGUMENT
    load = default.grpc.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="double"))
    assert await grpc_code(load) is grpc.StatusCode.INVALID_ARGUMENT
    # still served
    response = await default.rest.post("/v2/models/double/infer", json=BODY)
    assert response.status_code == 200


async def test_explicit_mode_needs_the_admin_token_rest(explicit: Edges) -> None:
    missing = await explicit.rest.post("/v2/repository/models/double/unload")
    assert missing.status_code == 401
    assert "admin token" in missing.json()["error"]
    wrong = await explicit.rest.post("/v2/repository/models/double/unload", headers=auth("nope"))
    assert wrong.status_code == 401
    assert (await explicit.rest.post("/v2/models/double/infer", json=BODY)).status_code == 200


async def test_explicit_mode_needs_the_admin_token_grpc(explicit: Edges) -> None:
    request = pb.RepositoryModelUnloadRequest(model_name="double")
    assert (
        await grpc_code(explicit.grpc.RepositoryModelUnload(request))
        is grpc.StatusCode.UNAUTHENTICATED
    )
    wrong = explicit.grpc.RepositoryModelUnload(request, metadata=(("authorization", "Bearer x"),))
    assert await grpc_code(wrong) is grpc.StatusCode.UNAUTHENTICATED


async def test_a_model_unloaded_on_purpose_is_not_retryable(explicit: Edges) -> None:
    unload = await explicit.rest.post("/v2/repository/models/double/unload", headers=auth(TOKEN))
    assert unload.status_code == 200

    response = await explicit.rest.post("/v2/models/double/infer", json=BODY)
    assert response.status_code == 404
    assert "unloaded through the repository API" in response.json()["error"]
    assert "retry-after" not in response.headers
    grpc_request = pb.ModelInferRequest(model_name="double")
    grpc_request.inputs.add(name="x", datatype="FP32", shape=[1, 3])
    grpc_request.raw_input_contents.append(np.ones(3, dtype="<f4").tobytes())
    assert (
        await grpc_code(explicit.grpc.ModelInfer(grpc_request, timeout=30))
        is grpc.StatusCode.NOT_FOUND
    )
    # The server as a whole stays ready (documented): the model says it is not.
    assert (await explicit.rest.get("/ready")).status_code == 200
    assert (await explicit.rest.get("/v2/models/double/ready")).status_code != 200

    metadata = (("authorization", f"Bearer {TOKEN}"),)
    load = explicit.grpc.RepositoryModelLoad(
        pb.RepositoryModelLoadRequest(model_name="double"), metadata=metadata
    )
    assert await grpc_code(load) is grpc.StatusCode.OK
    assert (await explicit.rest.post("/v2/models/double/infer", json=BODY)).status_code == 200


@pytest.mark.parametrize(
    ("header", "token"),
    [("Bearer abc", "abc"), ("bearer  abc ", "abc"), ("Basic abc", None), ("Bearer", None)],
)
def test_bearer_token(header: str, token: str | None) -> None:
    from podserve.dataplane.model_control import bearer_token

    assert bearer_token(header) == token
