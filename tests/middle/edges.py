"""One inference call through either edge, with the outcome in common terms (the HTTP
status, or the HTTP status the gRPC code stands for), so one scenario table runs
through both. gRPC goes through the raw generated stub, which exposes trailing metadata
(Retry-After) that tritonclient drops."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import grpc
import httpx
import numpy as np
import numpy.typing as npt

from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc._generated import inference_pb2_grpc as pb_grpc

GRPC_AS_HTTP = {
    grpc.StatusCode.OK: 200,
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 413,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.CANCELLED: 499,
    grpc.StatusCode.INTERNAL: 500,
}


@dataclass(frozen=True)
class Outcome:
    status: int
    message: str = ""
    retry_after: str | None = None
    y: list[float] | None = None
    connection_close: bool = False


class Edge(Protocol):
    name: str

    async def infer(
        self,
        model: str,
        x: npt.NDArray[np.float32],
        *,
        timeout_us: int | None = None,
        client_timeout_s: float | None = None,
    ) -> Outcome: ...


class RestEdge:
    name = "rest"

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def infer(
        self,
        model: str,
        x: npt.NDArray[np.float32],
        *,
        timeout_us: int | None = None,
        client_timeout_s: float | None = None,
    ) -> Outcome:
        body: dict[str, object] = {
            "inputs": [
                {
                    "name": "x",
                    "datatype": "FP32",
                    "shape": list(x.shape),
                    "data": x.ravel().tolist(),
                }
            ]
        }
        if timeout_us is not None:
            body["parameters"] = {"timeout": timeout_us}
        headers = {}
        if client_timeout_s is not None:
            headers["x-request-timeout-ms"] = str(client_timeout_s * 1000)
        response = await self._client.post(f"/v2/models/{model}/infer", json=body, headers=headers)
        doc = response.json()
        if response.status_code != 200:
            return Outcome(
                response.status_code,
                doc["error"],
                response.headers.get("retry-after"),
                connection_close=response.headers.get("connection") == "close",
            )
        return Outcome(200, y=[float(v) for v in doc["outputs"][0]["data"]])


class GrpcEdge:
    name = "grpc"

    def __init__(self, channel: grpc.aio.Channel) -> None:
        self._stub = pb_grpc.GRPCInferenceServiceStub(channel)

    async def infer(
        self,
        model: str,
        x: npt.NDArray[np.float32],
        *,
        timeout_us: int | None = None,
        client_timeout_s: float | None = None,
    ) -> Outcome:
        request = pb.ModelInferRequest(model_name=model)
        request.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
        request.raw_input_contents.append(x.astype("<f4").tobytes())
        if timeout_us is not None:
            request.parameters["timeout"].int64_param = timeout_us  # as tritonclient sends it
        try:
            response = await self._stub.ModelInfer(request, timeout=client_timeout_s)
        except grpc.aio.AioRpcError as error:
            trailing = dict(error.trailing_metadata() or ())
            retry = trailing.get("retry-after")
            return Outcome(
                GRPC_AS_HTTP[error.code()],
                error.details() or "",
                None if retry is None else str(retry),
            )
        y = np.frombuffer(response.raw_output_contents[0], "<f4")
        return Outcome(200, y=[float(v) for v in y])
