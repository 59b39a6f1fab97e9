"""`inference.GRPCInferenceService` on grpc.aio, over the transport-free data plane.

Errors: every method ends with the status `server/grpc/status.py` maps its error to
(`status_for`, once, for every method).

Client disconnects and deadlines: grpc.aio cancels the handler task when the client
cancels or its deadline passes, and task cancellation is the data plane's one
cancellation contract (the REST edge cancels its handler the same way): a queued request
leaves its queue at once. The client's deadline reaches the data plane as for REST
(`server/grpc/context.py`, `call_context`). The bidirectional `ModelStreamInfer` is in
`server/grpc/stream.py`.

Why this edge is slower than REST (issue 16): docs/benchmarks.md, "Second pass on gRPC".
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AbstractAsyncContextManager

from podserve.admission.reservations import Reservation
from podserve.core.errors import InvalidInput, ModelNotFound
from podserve.core.ids import accept_request_id
from podserve.dataplane import DataPlaneAPI
from podserve.httpedge.decoding import BodyDecoding
from podserve.server.grpc import triton
from podserve.server.grpc._generated import inference_pb2 as pb
from podserve.server.grpc.codec import decode_infer_request, encode_infer_response
from podserve.server.grpc.context import Context, admin_call, call_context, metadata_value
from podserve.server.grpc.handlers import parse_infer_request
from podserve.server.grpc.shared_memory import SharedMemoryRpcs
from podserve.server.grpc.status import abort_with_status, request_code, status_on_error
from podserve.server.grpc.stream import StreamInferRpc
from podserve.server.repository_requests import refuse_parameters

# The `endpoint` label the data plane records for unary gRPC inference.
INFER_ENDPOINT = "grpc.ModelInfer"


class Asked:
    """What a unary call's message asks for, noted as soon as it is parsed: the drain's
    cut names it in its log line (`server/grpc/cut.py`)."""

    __slots__ = ("message_id", "model_name")

    def __init__(self) -> None:
        self.message_id = ""
        self.model_name = ""


class InferenceServicer(SharedMemoryRpcs, StreamInferRpc):
    """The RPC handlers; `server/grpc/handlers.py` registers them."""

    def __init__(self, dataplane: DataPlaneAPI, decoding: BodyDecoding) -> None:
        self._dataplane = dataplane
        # a big message's tensors are decoded off the event loop, as REST bodies are
        self._decoding = decoding
        self._streamed: set[asyncio.Task[None]] = set()  # see StreamInferRpc

    # ------------------------------------------------------------------ health

    async def ServerLive(
        self, request: pb.ServerLiveRequest, context: Context
    ) -> pb.ServerLiveResponse:
        async with status_on_error(context, "ServerLive"):
            return pb.ServerLiveResponse(live=self._dataplane.live().ok)

    async def ServerReady(
        self, request: pb.ServerReadyRequest, context: Context
    ) -> pb.ServerReadyResponse:
        async with status_on_error(context, "ServerReady"):
            return pb.ServerReadyResponse(ready=self._dataplane.ready().ok)

    async def ModelReady(
        self, request: pb.ModelReadyRequest, context: Context
    ) -> pb.ModelReadyResponse:
        async with status_on_error(context, "ModelReady"):
            # Triton answers OK with ready=false for a model it does not know (core
            # src/server.cc `InferenceServer::ModelIsReady`: `*ready = false`, then
            # Status::Success when GetModel fails), so clients polling readiness see
            # "not yet" rather than an error. REST keeps its 404 (DESIGN.md §2).
            try:
                ready = self._dataplane.model_ready(request.name, request.version or None)
            except ModelNotFound:
                ready = False
            return pb.ModelReadyResponse(ready=ready)

    # ------------------------------------------------------------------ metadata

    async def ServerMetadata(
        self, request: pb.ServerMetadataRequest, context: Context
    ) -> pb.ServerMetadataResponse:
        async with status_on_error(context, "ServerMetadata"):
            meta = self._dataplane.server_metadata()
            return pb.ServerMetadataResponse(
                name=meta.name, version=meta.version, extensions=list(meta.extensions)
            )

    async def ModelMetadata(
        self, request: pb.ModelMetadataRequest, context: Context
    ) -> pb.ModelMetadataResponse:
        async with status_on_error(context, "ModelMetadata"):
            meta = self._dataplane.model_metadata(request.name, request.version or None)
            tensor = pb.ModelMetadataResponse.TensorMetadata
            return pb.ModelMetadataResponse(
                name=meta.name,
                versions=list(meta.versions),
                platform=meta.platform,
                inputs=[
                    tensor(name=t.name, datatype=t.datatype.value, shape=t.shape)
                    for t in meta.inputs
                ],
                outputs=[
                    tensor(name=t.name, datatype=t.datatype.value, shape=t.shape)
                    for t in meta.outputs
                ],
            )

    # ------------------------------------------------------------------ inference

    async def ModelInfer(self, message: bytes, context: Context) -> pb.ModelInferResponse:
        return await self._model_infer(message, context, Asked())

    async def _model_infer(
        self, message: bytes, context: Context, asked: Asked
    ) -> pb.ModelInferResponse:
        """ModelInfer of `message` (its bytes, `server/grpc/handlers.py`), noting in
        `asked` what it asks for as soon as it is parsed."""
        # The per-call path, kept flat (no context manager) because it runs once per
        # request; where gRPC's time goes is in docs/benchmarks.md.
        started = time.perf_counter()
        dataplane = self._dataplane
        code = "200"
        request_id: str | None = None
        reservation: Reservation | None = None
        try:
            # Parsed here, not by grpc.aio (server/grpc/handlers.py); a big message on the
            # decoding thread, as a big REST body. protobuf's parser holds the GIL while
            # it runs, so the loop still waits out the parse itself (50 MB of 25M empty
            # BYTES elements: about 0.5 s), only no longer on top of it ByteSize's walk
            # of the message (0.2 s), which `len` replaces.
            size_bytes = len(message)
            request = await self._decoding.run(size_bytes, parse_infer_request, message)
            asked.model_name = request.model_name
            asked.message_id = request.id
            request_id = accept_request_id(request.id or metadata_value(context, "x-request-id"))
            # A full queue or a drain refuses before the tensors are decoded, and the
            # request let by holds a queue slot until `infer` queues it, as on REST
            # (admission/reservations.py): no refusal after a decode.
            reservation = dataplane.admit_early(request.model_name, request.model_version or None)
            if reservation is None:  # no tensor queue: maybe a generative model
                _refuse_generative(dataplane, request)
            # Typed contents become arrays element by element: 64 MiB of them held the
            # loop 0.6 s (FP32) to 2 s (BYTES).
            infer_request = await self._decoding.run(
                size_bytes,
                decode_infer_request,
                request,
                request_id=request_id,
                shared_memory=dataplane.shared_memory,
            )
            response = await dataplane.infer(
                infer_request, call_context(context, INFER_ENDPOINT, request_id, reservation)
            )
            return encode_infer_response(response, request_id=request_id, message_id=request.id)
        except Exception as exc:  # every error must become a status, counted by its code
            code = request_code(exc)
            if request_id is None:  # the message could not be parsed: its id is unknown
                request_id = accept_request_id(metadata_value(context, "x-request-id"))
            await abort_with_status(context, exc, "ModelInfer", request_id)
        except BaseException as exc:  # cancelled: the client left or its deadline passed
            code = request_code(exc)
            raise
        finally:
            if reservation is not None:  # a decode error or a cancel: give the slot back
                reservation.release()
            dataplane.record_request(
                asked.model_name, INFER_ENDPOINT, code, time.perf_counter() - started
            )

    # ------------------------------------------------------------------ Triton extensions

    async def ModelConfig(
        self, request: pb.ModelConfigRequest, context: Context
    ) -> pb.ModelConfigResponse:
        async with status_on_error(context, "ModelConfig"):
            _check_model_name(request.name)
            view = self._dataplane.model_config(request.name, request.version or None)
            return triton.encode_model_config(view)

    async def ModelStatistics(
        self, request: pb.ModelStatisticsRequest, context: Context
    ) -> pb.ModelStatisticsResponse:
        async with status_on_error(context, "ModelStatistics"):
            stats = self._dataplane.model_statistics(request.name or None, request.version or None)
            return triton.encode_model_statistics(stats)

    # ------------------------------------------------------------------ repository extension

    async def RepositoryIndex(
        self, request: pb.RepositoryIndexRequest, context: Context
    ) -> pb.RepositoryIndexResponse:
        async with status_on_error(context, "RepositoryIndex"):
            _check_repository_name(request.repository_name)
            entries = self._dataplane.repository_index(ready_only=request.ready)
            index = pb.RepositoryIndexResponse.ModelIndex
            return pb.RepositoryIndexResponse(
                models=[
                    index(name=e.name, version=e.version, state=e.state, reason=e.reason)
                    for e in entries
                ]
            )

    async def RepositoryModelLoad(
        self, request: pb.RepositoryModelLoadRequest, context: Context
    ) -> pb.RepositoryModelLoadResponse:
        async with status_on_error(context, "RepositoryModelLoad"):
            _check_repository_name(request.repository_name)
            _check_model_name(request.model_name)
            refuse_parameters(request.parameters, "load")
            await self._dataplane.load_model(request.model_name, admin_call(context))
            return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(
        self, request: pb.RepositoryModelUnloadRequest, context: Context
    ) -> pb.RepositoryModelUnloadResponse:
        async with status_on_error(context, "RepositoryModelUnload"):
            _check_repository_name(request.repository_name)
            _check_model_name(request.model_name)
            refuse_parameters(request.parameters, "unload")
            await self._dataplane.unload_model(request.model_name, admin_call(context))
            return pb.RepositoryModelUnloadResponse()

    def _guard(self, context: Context, method: str) -> AbstractAsyncContextManager[None]:
        return status_on_error(context, method)


def _check_repository_name(name: str) -> None:
    if name:
        raise InvalidInput(
            f"repository {name!r} is unknown: podserve serves one repository; "
            f"leave repository_name empty"
        )


def _check_model_name(name: str) -> None:
    if not name:
        raise InvalidInput("model_name is required")


def _refuse_generative(dataplane: DataPlaneAPI, request: pb.ModelInferRequest) -> None:
    """A generative model answers a unary ModelInfer with gRPC's way to it: the data
    plane's own refusal names only the HTTP routes."""
    name = request.model_name
    if dataplane.is_generative(name, request.model_version or None):
        raise InvalidInput(
            f"model {name!r} generates text: on gRPC send its request (the vLLM backend's "
            f"tensors: text_input, stream) on ModelStreamInfer, which answers as it "
            f"generates; over HTTP use /v1/completions, /v1/chat/completions or "
            f"/v2/models/{name}/generate"
        )
