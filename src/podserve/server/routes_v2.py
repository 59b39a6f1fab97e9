"""Open Inference Protocol v2 REST routes: metadata, model readiness, infer, and the
model-repository extension. Decoding and encoding live in protocol/v2; this module only
moves bytes between HTTP and the data plane."""

from __future__ import annotations

from podserve.dataplane import CallContext, DataPlane
from podserve.dataplane.model_control import bearer_token
from podserve.httpedge.decoding import BodyDecoding
from podserve.protocol.v2 import (
    INFERENCE_HEADER_CONTENT_LENGTH,
    binary_output_names,
    decode_infer_request,
    decode_repository_index_request,
    encode_infer_response,
    encode_model_metadata,
    encode_repository_index,
    encode_server_metadata,
    parse_header_length,
)
from podserve.protocol.v2.triton import encode_model_config, encode_model_statistics
from podserve.server.http import JSON, Request, Response, control_body, json_response
from podserve.server.repository_requests import Action, check_body

OCTET_STREAM = b"application/octet-stream"
_HEADER_LENGTH = INFERENCE_HEADER_CONTENT_LENGTH.lower()


class V2Routes:
    def __init__(self, dataplane: DataPlane, decoding: BodyDecoding) -> None:
        self._dataplane = dataplane
        self._decoding = decoding
        self._max_body_bytes = dataplane.edge.max_body_bytes

    async def server_metadata(self, request: Request) -> Response:
        return Response(200, encode_server_metadata(self._dataplane.server_metadata()))

    async def model_metadata(self, request: Request) -> Response:
        name, version = request.model, request.path_params.get("version")
        return Response(200, encode_model_metadata(self._dataplane.model_metadata(name, version)))

    async def model_config(self, request: Request) -> Response:
        name, version = request.model, request.path_params.get("version")
        return Response(200, encode_model_config(self._dataplane.model_config(name, version)))

    async def model_statistics(self, request: Request) -> Response:
        # `GET /v2/models/stats` (every loaded model) routes here with no model
        name, version = request.model or None, request.path_params.get("version")
        return Response(
            200, encode_model_statistics(self._dataplane.model_statistics(name, version))
        )

    async def model_ready(self, request: Request) -> Response:
        name, version = request.model, request.path_params.get("version")
        ready = self._dataplane.model_ready(name, version)
        return json_response(200 if ready else 503, {"name": name, "ready": ready})

    async def infer(self, request: Request) -> Response:
        # An unknown model is a 404 before its body costs any decoding.
        self._dataplane.check_model(request.model, request.path_params.get("version"))
        body = await request.body(self._max_body_bytes)
        header_length = parse_header_length(request.header(_HEADER_LENGTH))
        # A big body is decoded off the event loop (httpedge/decoding.py), its binary
        # part counted too: BYTES tensors there are split element by element (a Python
        # loop: 16 MB of empty elements held the loop 5 s when only the JSON part was
        # counted), and fixed-size ones copied (protocol/v2/raw.py).
        infer_request = await self._decoding.run(
            len(body),
            decode_infer_request,
            body,
            model_name=request.model,
            model_version=request.path_params.get("version"),
            header_length=header_length,
            shared_memory=self._dataplane.shared_memory,
        )
        call = CallContext(
            endpoint="v2",
            request_id=request.request_id,
            timeout_ms=request.header("x-request-timeout-ms"),
            reservation=request.reservation,
        )
        response = await self._dataplane.infer(infer_request, call)
        binary = binary_output_names(infer_request, (t.name for t in response.outputs))
        payload, json_length = encode_infer_response(response, binary_outputs=binary)
        if json_length is None:
            return Response(200, payload, JSON)
        return Response(
            200,
            payload,
            OCTET_STREAM,
            [(b"inference-header-content-length", str(json_length).encode())],
        )

    async def repository_index(self, request: Request) -> Response:
        body = await control_body(request, self._max_body_bytes, "repository index")
        ready_only = decode_repository_index_request(body)
        entries = self._dataplane.repository_index(ready_only)
        return Response(200, encode_repository_index(entries))

    async def load(self, request: Request) -> Response:
        await self._check_control_body(request, "load")
        await self._dataplane.load_model(request.model, _admin_call(request))
        return json_response(200, {})

    async def unload(self, request: Request) -> Response:
        await self._check_control_body(request, "unload")
        await self._dataplane.unload_model(request.model, _admin_call(request))
        return json_response(200, {})

    async def _check_control_body(self, request: Request, action: Action) -> None:
        body = await control_body(
            request,
            self._max_body_bytes,
            f"repository {action}",
            ": podserve takes no model files or config overrides",
        )
        check_body(body, action)


def _admin_call(request: Request) -> CallContext:
    """A repository call with its credentials (`Authorization: Bearer <token>`)."""
    return CallContext(
        endpoint="v2.repository",
        request_id=request.request_id,
        admin_token=bearer_token(request.header("authorization")),
    )
